package main

import (
	"testing"

	"github.com/meshlet/meshlet/examples/internal/demotest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestDemo runs make demo's story end to end, on the same real parts, and
// checks what it tells: a demo that stops working fails make test.
func TestDemo(t *testing.T) {
	privtest.RequireRoot(t)
	privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directory test/env/install-runtime.sh prints; make test sets it")
	demotest.Tell(t, "demo", &story, func() int { return run(nil) },
		"meshlet is ready (NRI plugin 10-meshlet registered",
		"Add uid=demo-uid-productpage name=productpage namespace=bookinfo",
		"(matches the sandbox netns)",
		"Pods enrolled: productpage",
		"legacy's network namespace has no meshlet table: untouched.",
		"table inet meshlet",
		"meshlet_enrolled_pods 1",
		"Stopped productpage: ztunnel got Del uid=demo-uid-productpage.",
		"Cleaning up",
	)
}
