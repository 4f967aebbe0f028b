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
