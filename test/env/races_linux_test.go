package env

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckRaces: a race report in any meshlet log fails the environment's
// teardown, naming the log; clean logs and other components' logs do not.
func TestCheckRaces(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("meshlet.log", "I1202 enrolled pod\n")
	write("containerd.log", "WARNING: DATA RACE (not meshlet's)\n")
	if err := checkRaces(dir); err != nil {
		t.Fatalf("clean meshlet log: %v", err)
	}
	write("meshlet.log", "I1202 enrolled pod\n==================\nWARNING: DATA RACE\nWrite at 0x00c000 by goroutine 7:\n")
	err := checkRaces(dir)
	if err == nil || !strings.Contains(err.Error(), "1 data race(s)") || !strings.Contains(err.Error(), filepath.Join(dir, "meshlet.log")) {
		t.Fatalf("race in meshlet.log: got %v, want 1 data race(s) in it", err)
	}
}
