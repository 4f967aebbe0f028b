package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/internal/privtest"
)

// TestStateDirMustBeWritable: a state dir that cannot be created is refused
// at start-up. Root writes through directory permissions, so as root (CI)
// the parent is a read-only bind mount, which stops root too (EROFS).
func TestStateDirMustBeWritable(t *testing.T) {
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	privtest.ReadOnlyDir(t, ro)
	cfg, err := parse(t, []string{"--standalone", "--state-dir=" + filepath.Join(ro, "state")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--state-dir") || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("Validate = %v, want an error naming --state-dir saying not writable", err)
	}
}
