package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImports: the plugin links meshlet's shim and wire protocol (and the
// strict JSON decoder and seqpacket framing the wire shares with
// meshlet-gate, both standard library only) and nothing else of meshlet's, and those import only the
// CNI library (and the standard library): it runs once per pod on every
// node and must stay small and independent of the agent.
func TestImports(t *testing.T) {
	list := func(format string, pkgs ...string) []string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list", "-f", format}, pkgs...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	const meshlet = "github.com/meshlet/meshlet/"
	ours := map[string]bool{meshlet + "cmd/meshlet-cni": true, meshlet + "cnifallback/shim": true, meshlet + "cnifallback/wire": true,
		meshlet + "internal/strictjson": true, meshlet + "internal/seqpacket": true}
	deps := list("{{if not .Standard}}{{.ImportPath}}{{end}}", "-deps", ".")
	for _, pkg := range deps {
		if strings.HasPrefix(pkg, meshlet) && !ours[pkg] {
			t.Errorf("meshlet-cni links %s", pkg)
		}
	}
	direct := list(`{{range .Imports}}{{.}} {{end}}`, ".", "../../cnifallback/shim", "../../cnifallback/wire")
	for _, imp := range direct {
		first, _, _ := strings.Cut(imp, "/")
		if strings.Contains(first, ".") && !ours[imp] && !strings.HasPrefix(imp, "github.com/containernetworking/cni/") {
			t.Errorf("the plugin's code imports %s: only the CNI library and the standard library are allowed", imp)
		}
	}
	if len(deps) < 3 || len(direct) < 3 {
		t.Fatalf("go list named too little: deps %v, imports %v", deps, direct)
	}
}

// maxBinarySize is the stripped plugin's budget (Istio's is ~35 MiB).
const maxBinarySize = 5 << 20

// TestBinarySize builds the plugin as it is shipped (static, stripped) and
// holds it to its budget.
func TestBinarySize(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "meshlet-cni")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meshlet-cni: %d bytes (%.1f MiB)", fi.Size(), float64(fi.Size())/(1<<20))
	if fi.Size() > maxBinarySize {
		t.Fatalf("meshlet-cni is %d bytes, over its %d-byte budget", fi.Size(), maxBinarySize)
	}
}
