package zds_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/zds"
)

// A socket path too long for sun_path fails in bind, after the socket's
// directory was created: that directory must not be left behind, while
// one that existed before stays.
func TestFailedListenLeavesNoDirectoryBehind(t *testing.T) {
	existing := t.TempDir()
	long := strings.Repeat("s", 200) // fits a file name, not sun_path
	path := filepath.Join(existing, "created", "also-created", long)
	if _, err := zds.Listen(zds.Config{SocketPath: path}); err == nil {
		t.Fatalf("Listen on a %d-byte path succeeded", len(path))
	}
	if _, err := os.Stat(filepath.Join(existing, "created")); !os.IsNotExist(err) {
		t.Errorf("directory created by the failed Listen left behind (stat: %v)", err)
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("pre-existing directory removed: %v", err)
	}
}

// A Listen that fails in a directory that existed before removes nothing.
func TestFailedListenKeepsWhatExisted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sockets")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Not a socket: Listen refuses to replace it.
	if _, err := zds.Listen(zds.Config{SocketPath: filepath.Join(dir, "other")}); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); err != nil {
		t.Errorf("existing file gone: %v", err)
	}
}
