package agent

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestNothingImportsTheRoot: the composition root (this package) wires the
// adapters to the core; only the daemon's main imports it. An adapter or
// the core importing it would turn the layers (core ← adapters ← root)
// into a cycle in all but name. The core's own side is
// agent/enroll's TestCoreImportsNoAdapters.
func TestNothingImportsTheRoot(t *testing.T) {
	const root = "github.com/meshlet/meshlet/agent"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var importers []string
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		fields := strings.Fields(line)
		if slices.Contains(fields[1:], root) {
			importers = append(importers, fields[0])
		}
	}
	if want := []string{"github.com/meshlet/meshlet/cmd/meshlet"}; !slices.Equal(importers, want) {
		t.Fatalf("packages importing %s: %v, want only %v", root, importers, want)
	}
	if len(lines) < 30 {
		t.Fatalf("go list named %d packages: too few to tell", len(lines))
	}
}
