package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/examples/internal/narrate"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// TestDemo runs make demo-dra's story end to end, on the same real parts, and
// checks what it tells: a demo that stops working fails make test.
func TestDemo(t *testing.T) {
	privtest.RequireRoot(t)
	privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directories test/env/install-runtime.sh and install-cluster.sh print; make test sets them")
	privtest.RequireEnv(t, clusterenv.BinEnv, "the directories test/env/install-runtime.sh and install-cluster.sh print; make test sets them")
	var b bytes.Buffer
	story = narrate.New("demo-dra", &b, &b)
	rc := run()
	t.Logf("make demo-dra told:\n%s", b.String())
	if rc != 0 {
		t.Fatalf("the demo exited %d", rc)
	}
	for _, want := range []string{
		`Node "e2e" is Ready`,
		"Applied DeviceClass mesh.meshlet.dev",
		"DRA kubelet plugin mesh.meshlet.dev registered",
		"Pod Running",
		"made by the scheduler for the extended resource",
		"What ztunnel received for the pod:",
		"Readiness: disconnecting the ztunnel stand-in",
		"Cleaned up: cluster stopped",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the demo did not tell %q", want)
		}
	}
	if strings.Contains(b.String(), "UNEXPECTED") {
		t.Error("the demo saw something unexpected")
	}
}
