package claimstore

import (
	"os/exec"
	"strings"
	"testing"
)

// The store stays out of the kubelet plugin's dependency graph: its fuzz
// target's cost per input follows the coverage of everything it links.
var forbiddenImports = []string{
	"k8s.io/client-go",
	"k8s.io/dynamic-resource-allocation",
	"k8s.io/kubelet",
	"google.golang.org/grpc",
	"github.com/meshlet/meshlet/draplugin",
	"github.com/meshlet/meshlet/agent/", // but the core, below
}

// allowed are meshlet packages under a forbidden prefix the store may use.
var allowed = map[string]bool{
	"github.com/meshlet/meshlet/draplugin/apis/v1alpha1": true,
	"github.com/meshlet/meshlet/agent/enroll":            true,
}

func TestImportsStaySmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps -test: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps returned only %d packages: %q", len(deps), deps)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/meshlet/meshlet/draplugin/claimstore") || allowed[dep] {
			continue
		}
		for _, bad := range forbiddenImports {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("draplugin/claimstore depends on %s (forbidden prefix %s)", dep, bad)
			}
		}
	}
}
