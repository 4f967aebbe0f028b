package chaintest

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
)

// failVersion is the spec version of the failure tests: the newest
// Debian's plugins speak.
const failVersion = "1.0.0"

// tryAgainLater asserts err is the CNI error 11 a runtime retries, and
// that its text has every one of want.
func tryAgainLater(t *testing.T, err error, want ...string) {
	t.Helper()
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD = %v, want CNI error %d (try again later)", err, types.ErrTryAgainLater)
	}
	for _, w := range want {
		if !strings.Contains(te.Error(), w) {
			t.Fatalf("ADD's error %q does not say %q", te.Error(), w)
		}
	}
}

// TestAgentDown: with the agent's socket gone, a mesh pod's ADD fails
// closed (try again later, naming the socket) and a pod of an excluded
// namespace starts untouched; DEL succeeds for both.
func TestAgentDown(t *testing.T) {
	n := newNode(t)
	a := startAgent(t, n)
	ctx := testContext(t)
	cni := n.cni(pluginDir(t, failVersion))
	const excluded = "istio-system"
	list := n.conflist(t, failVersion, a.meshlet(map[string]any{"excludeNamespaces": []string{excluded}}))
	a.stopCNI()
	if _, err := os.Stat(a.socket); !os.IsNotExist(err) {
		t.Fatalf("the agent's socket after it stopped: %v, want it gone", err)
	}

	mesh := newPod(t, meshNS, "cart")
	_, _, err := n.add(ctx, cni, list, mesh)
	tryAgainLater(t, err, "meshlet agent unreachable", mesh.namespace+"/"+mesh.name, a.socket)
	if err := n.del(ctx, cni, list, mesh); err != nil {
		t.Fatalf("DEL of the pod whose ADD failed: %v", err)
	}

	infra := newPod(t, excluded, "ztunnel-abc")
	res, _, err := n.add(ctx, cni, list, infra)
	if err != nil {
		t.Fatalf("ADD in an excluded namespace without the agent: %v", err)
	}
	if want := n.exec.last(t, "bridge", "ADD").stdout; !sameResult(t, res, want) {
		t.Fatalf("ADD returned %s\nwant the bridge's result %s", printed(t, res), want)
	}
	if infra.hasTable(t) {
		t.Fatal("meshlet's rules in a pod started without the agent")
	}
	if err := n.del(ctx, cni, list, infra); err != nil {
		t.Fatalf("DEL without the agent: %v", err)
	}
	if got := a.core.enrolls.Load() + a.core.forgets.Load(); got != 0 {
		t.Fatalf("%d requests reached the stopped agent's core", got)
	}
}

// TestZtunnelDown: with no ztunnel connected, the core refuses to enroll
// a starting pod (it must not run as if meshed): ADD fails with the step
// and the cause, and the attempt leaves nothing in the pod's namespace,
// the node's rules or the agent's fds.
func TestZtunnelDown(t *testing.T) {
	n := newNode(t)
	a := startAgent(t, n)
	ctx := testContext(t)
	cni := n.cni(pluginDir(t, failVersion))
	list := n.conflist(t, failVersion, a.meshlet(nil))
	a.stopZtunnel(t)

	p := newPod(t, meshNS, "cart")
	_, _, err := n.add(ctx, cni, list, p)
	tryAgainLater(t, err, "must join the mesh but could not be enrolled ("+string(enroll.StepProxy)+")", zds.ErrNoProxy.Error())
	ip := podIP(t, resultOf(t, n.exec.last(t, "bridge", "ADD")))
	if st, _ := a.core.Status(p.uid); st.State != enroll.StateFailed || !strings.Contains(st.Reason, string(enroll.StepProxy)) {
		t.Fatalf("the core has the pod %s (%s), want failed at the ztunnel step", st.State, st.Reason)
	}
	if p.hasTable(t) || p.hasProxyRouting(t) {
		t.Fatalf("the failed ADD left meshlet's table (%t) or routing (%t) in the pod", p.hasTable(t), p.hasProxyRouting(t))
	}
	if snat := n.nodeSNAT(t); strings.Contains(snat, ip.String()) {
		t.Fatalf("the failed ADD left %s in the node's probe SNAT:\n%s", ip, snat)
	}
	if held := p.held(t); held != 0 {
		t.Fatalf("the failed ADD left %d fds on the pod's netns", held)
	}
	if err := n.del(ctx, cni, list, p); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, known := a.core.Status(p.uid); known {
		t.Fatal("the core still knows the pod after DEL")
	}
}

// TestBadConfig: a meshlet-cni entry the plugin cannot use fails ADD with
// the spec's invalid-configuration error naming the field, before anything
// reaches the agent.
func TestBadConfig(t *testing.T) {
	n := newNode(t)
	a := startAgent(t, n)
	cni := n.cni(pluginDir(t, failVersion))
	for field, value := range map[string]string{"agentSocket": "run/meshlet/cni.sock", "agentTimeout": "soon"} {
		t.Run(field, func(t *testing.T) {
			ctx := testContext(t)
			list := n.conflist(t, failVersion, a.meshlet(map[string]any{field: value}))
			p := newPod(t, meshNS, "cart")
			_, _, err := n.add(ctx, cni, list, p)
			var te *types.Error
			if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Error(), field) || !strings.Contains(te.Error(), value) {
				t.Fatalf("ADD = %v, want CNI error %d naming %s %q", err, types.ErrInvalidNetworkConfig, field, value)
			}
			if err := n.del(ctx, cni, list, p); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got := a.core.enrolls.Load() + a.core.forgets.Load(); got != 0 {
				t.Fatalf("%d requests reached the agent's core from a plugin it could not configure", got)
			}
			if adds := a.requests(p.uid, zdstest.Add); len(adds) != 0 || p.hasTable(t) {
				t.Fatalf("a pod whose plugin could not be configured was enrolled: %v", adds)
			}
		})
	}
}
