package main

import (
	"testing"

	"github.com/meshlet/meshlet/examples/internal/demotest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// TestDemo runs make demo-dra's story end to end, on the same real parts, and
// checks what it tells: a demo that stops working fails make test.
func TestDemo(t *testing.T) {
	privtest.RequireRoot(t)
	privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directory test/env/install-runtime.sh prints; make test sets it")
	privtest.RequireEnv(t, clusterenv.BinEnv, "the directory test/env/install-cluster.sh prints; make test sets it")
	demotest.Tell(t, "demo-dra", &story, run,
		`Node "e2e" is Ready`,
		"Applied DeviceClass mesh.meshlet.dev",
		"DRA kubelet plugin mesh.meshlet.dev registered",
		"Pod Running",
		"made by the scheduler for the extended resource",
		"What ztunnel received for the pod:",
		"Readiness: disconnecting the ztunnel stand-in",
		"Cleaned up: cluster stopped",
	)
}
