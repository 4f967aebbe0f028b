package main

import (
	"testing"

	"github.com/meshlet/meshlet/examples/internal/demotest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestDemo runs make demo-cni's story end to end, on the same real parts,
// and checks what it tells: a demo that stops working fails make test.
func TestDemo(t *testing.T) {
	privtest.RequireRoot(t)
	privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directory test/env/install-runtime.sh prints; make test sets it")
	privtest.RequireEnv(t, "MESHLET_KUBE_BIN", "the directory test/env/install-kube.sh prints; make test sets it")
	demotest.Tell(t, "demo-cni", &story, run,
		"meshlet chose its mode itself (--mode auto)",
		"The conflist now ends with meshlet-cni",
		`"type": "meshlet-cni"`,
		"legacy/legacy (namespace not in the mesh) has no meshlet table: untouched.",
		"meshlet put it back after",
		"a new mesh pod is refused instead of starting unmeshed",
		"meshlet is back: the kubelet's retry (here bookinfo/reviews-retry) is enrolled (1 ztunnel Add for it)",
		"Cleaning up",
	)
}
