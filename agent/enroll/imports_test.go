package enroll

import (
	"os/exec"
	"strings"
	"testing"
)

// The core must stay independent of every runtime and API adapter: those
// translate into Pod and call in, never the other way round.
var forbiddenImports = []string{
	"github.com/containerd/nri",
	"github.com/containernetworking/",
	"k8s.io/client-go",
	"k8s.io/api/",
	"k8s.io/apimachinery",
	"k8s.io/dynamic-resource-allocation",
	"k8s.io/kubelet",
	"k8s.io/cri-api",
	"github.com/meshlet/meshlet/nriplugin",
	"github.com/meshlet/meshlet/draplugin",
	"github.com/meshlet/meshlet/cnifallback",
	"github.com/meshlet/meshlet/agent/", // adapters import the core, not the reverse
}

func TestCoreImportsNoAdapters(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps returned only %d packages: %q", len(deps), deps)
	}
	for _, dep := range deps {
		if dep == "github.com/meshlet/meshlet/agent/enroll" {
			continue
		}
		for _, bad := range forbiddenImports {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("agent/enroll depends on %s (forbidden prefix %s)", dep, bad)
			}
		}
	}
}
