package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/examples/internal/narrate"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestDemo runs make demo-cni's story end to end, on the same real parts, and
// checks what it tells: a demo that stops working fails make test.
func TestDemo(t *testing.T) {
	privtest.RequireRoot(t)
	privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directories test/env/install-runtime.sh and install-kube.sh print; make test sets them")
	privtest.RequireEnv(t, "MESHLET_KUBE_BIN", "the directories test/env/install-runtime.sh and install-kube.sh print; make test sets them")
	var b bytes.Buffer
	story = narrate.New("demo-cni", &b, &b)
	rc := run()
	t.Logf("make demo-cni told:\n%s", b.String())
	if rc != 0 {
		t.Fatalf("the demo exited %d", rc)
	}
	for _, want := range []string{
		"meshlet chose its mode itself (--mode auto)",
		"The conflist now ends with meshlet-cni",
		`"type": "meshlet-cni"`,
		"legacy/legacy (namespace not in the mesh) has no meshlet table: untouched.",
		"meshlet put it back after",
		"a new mesh pod is refused instead of starting unmeshed",
		"meshlet is back: the kubelet's retry (here bookinfo/reviews-retry) is enrolled (1 ztunnel Add for it)",
		"Cleaning up",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the demo did not tell %q", want)
		}
	}
	if strings.Contains(b.String(), "UNEXPECTED") {
		t.Error("the demo saw something unexpected")
	}
}
