package zdstest

import (
	"os"
	"testing"
)

// SocketDir returns a new directory for a test's Unix sockets, removed
// when the test ends. It is short: socket paths are limited to 108 bytes,
// which a t.TempDir() under a long test name can exceed.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "zds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
