package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/state"
)

// TestCorruptCheckpointIsSetAside: a start-up with a corrupt checkpoint
// adopts nothing and keeps the file for the operator, under a new name.
func TestCorruptCheckpointIsSetAside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, state.FileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	if got := loadCheckpoint(dir, logger); len(got) != 0 {
		t.Fatalf("records from a corrupt checkpoint: %v", got)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), state.FileName+".corrupt-") {
		t.Fatalf("state dir after start-up: %v, want only the corrupt file set aside", ents)
	}
}

// TestOlderCheckpointIsIgnoredQuietly: an upgrade from an older checkpoint
// format adopts nothing and leaves the file to be replaced, not set aside.
func TestOlderCheckpointIsIgnoredQuietly(t *testing.T) {
	dir := t.TempDir()
	old := []byte(`{"version":1,"pods":[{"uid":"a","netnsInode":1,"ips":["192.0.2.1"],"dnsCapture":true}]}`)
	if err := os.WriteFile(filepath.Join(dir, state.FileName), old, 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	if got := loadCheckpoint(dir, logger); len(got) != 0 {
		t.Fatalf("records from an older checkpoint: %v", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, state.FileName)); err != nil || string(b) != string(old) {
		t.Fatalf("older checkpoint moved or changed: %q, %v", b, err)
	}
}
