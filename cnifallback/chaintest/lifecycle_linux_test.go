package chaintest

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
)

// chainTimeout bounds one CNI command of a test (a runtime's is minutes).
const chainTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, chainTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestMeshPodLifecycle: in every spec version with chaining, a pod of a
// mesh namespace goes through the real chain: ADD returns the bridge's
// result unchanged, the pod is enrolled (meshlet's rules in its namespace,
// ztunnel handed that namespace, the node's probe SNAT holding the address
// host-local gave it), CHECK passes, DEL releases it (ztunnel's Del, the
// core forgets it and lets go of the namespace) and a second DEL succeeds.
func TestMeshPodLifecycle(t *testing.T) {
	n := newNode(t)
	a := startAgent(t, n)
	for _, v := range specVersions(t) {
		t.Run(v, func(t *testing.T) {
			ctx := testContext(t)
			cni := n.cni(pluginDir(t, v))
			list := n.conflist(t, v, a.meshlet(nil))
			p := newPod(t, meshNS, "cart")

			res, _, err := n.add(ctx, cni, list, p)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			n.delOnFailure(t, cni, list, p)
			if res.Version() != v {
				t.Fatalf("result version %s, want %s", res.Version(), v)
			}
			// What the chain without meshlet-cni returns is the bridge's
			// output, which meshlet-cni was given.
			bridge := n.exec.last(t, "bridge", "ADD").stdout
			if !sameResult(t, res, bridge) || !sameResult(t, resultOf(t, n.exec.last(t, "meshlet-cni", "ADD")), bridge) {
				t.Fatalf("ADD returned %s\nwant the bridge's result %s", printed(t, res), bridge)
			}
			ip := podIP(t, res)
			if !n.hasLink(n.bridge) || !p.hasLink(t, "eth0") {
				t.Fatalf("the chain did not plumb the pod: bridge %s in the node %t, eth0 in the pod %t", n.bridge, n.hasLink(n.bridge), p.hasLink(t, "eth0"))
			}
			// Everything node-side is in the node's namespace, none in
			// the test process's.
			for _, link := range []string{n.bridge, hostVeth(t, res)} {
				if _, err := netlink.LinkByName(link); err == nil {
					t.Fatalf("%s is in the test process's own network namespace", link)
				}
			}

			if !p.hasTable(t) || !p.hasProxyRouting(t) {
				t.Fatalf("after ADD the pod has meshlet's table %t, routing %t; want both", p.hasTable(t), p.hasProxyRouting(t))
			}
			// The plugin returns once the agent answered, and the agent
			// once ztunnel acked: no waiting.
			adds := a.requests(p.uid, zdstest.Add)
			if len(adds) != 1 || adds[0].NetnsInode != p.inode(t) {
				t.Fatalf("ztunnel got %v for the pod, want one Add of its netns (inode %d)", adds, p.inode(t))
			}
			if info := adds[0].Info; info.GetName() != p.name || info.GetNamespace() != meshNS || info.GetServiceAccount() != "default" {
				t.Fatalf("ztunnel's Add carries %v", info)
			}
			rec, ok := a.core.Record(p.uid)
			if !ok || !slices.Equal(rec.IPs, []netip.Addr{ip}) || rec.NetnsInode != p.inode(t) {
				t.Fatalf("the core's record %+v (known %t), want the pod's netns and host-local's %s", rec, ok, ip)
			}
			if snat := n.nodeSNAT(t); !strings.Contains(snat, ip.String()) {
				t.Fatalf("the node's probe SNAT lacks the pod's %s:\n%s", ip, snat)
			}

			if ok, _ := version.GreaterThanOrEqualTo(v, "0.4.0"); ok {
				if err := n.check(ctx, cni, list, p); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
				if n.exec.ran("meshlet-cni", "CHECK") == 0 {
					t.Fatal("CHECK did not reach meshlet-cni")
				}
				if got := len(a.requests(p.uid, zdstest.Add)); got != 1 {
					t.Fatalf("CHECK re-added the pod to ztunnel (%d Adds)", got)
				}
			}

			if err := n.del(ctx, cni, list, p); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if dels := a.requests(p.uid, zdstest.Del); len(dels) != 1 {
				t.Fatalf("ztunnel got %d Dels for the pod, want 1", len(dels))
			}
			if st, known := a.core.Status(p.uid); known {
				t.Fatalf("the core still knows the pod after DEL: %+v", st)
			}
			if snat := n.nodeSNAT(t); strings.Contains(snat, ip.String()) {
				t.Fatalf("the node's probe SNAT still holds %s after DEL:\n%s", ip, snat)
			}
			if p.hasLink(t, "eth0") {
				t.Fatal("the pod's eth0 outlived DEL: the chain's DEL stopped before the bridge")
			}
			// Forget removes node-side state only: the runtime destroys
			// the pod's namespace after DEL, the rules with it.
			if !p.hasTable(t) {
				t.Fatal("DEL entered the pod's namespace to remove the rules; the core's Forget leaves them to the namespace's end")
			}
			// The agent let go of the namespace (the stand-in's own copy
			// of the fd aside).
			for _, r := range adds {
				r.Close()
			}
			if held := p.held(t); held != 0 {
				t.Fatalf("%d fds still held on the pod's netns after DEL", held)
			}

			if err := n.del(ctx, cni, list, p); err != nil {
				t.Fatalf("second DEL: %v", err)
			}
			if dels := a.requests(p.uid, zdstest.Del); len(dels) != 1 {
				t.Fatalf("a second DEL sent ztunnel another Del (%d)", len(dels))
			}
		})
	}
}

// TestPlainPodUntouched: a pod policy does not select goes through the
// chain with the bridge's result and nothing of meshlet's.
func TestPlainPodUntouched(t *testing.T) {
	n := newNode(t)
	a := startAgent(t, n)
	ctx := testContext(t)
	const v = "1.0.0"
	cni := n.cni(pluginDir(t, v))
	list := n.conflist(t, v, a.meshlet(nil))
	p := newPod(t, plainNS, "blog")

	res, _, err := n.add(ctx, cni, list, p)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	n.delOnFailure(t, cni, list, p)
	if want := n.exec.last(t, "bridge", "ADD").stdout; !sameResult(t, res, want) {
		t.Fatalf("ADD returned %s\nwant the bridge's result %s", printed(t, res), want)
	}
	if st, _ := a.core.Status(p.uid); st.State != enroll.StateSkipped || st.Reason != policy.ReasonNotSelected {
		t.Fatalf("the core has the pod %s (%s), want skipped, %s", st.State, st.Reason, policy.ReasonNotSelected)
	}
	if p.hasTable(t) || p.hasProxyRouting(t) {
		t.Fatal("meshlet's rules are in a pod outside the mesh")
	}
	if adds := a.requests(p.uid, zdstest.Add); len(adds) != 0 {
		t.Fatalf("ztunnel got %v for a pod outside the mesh", adds)
	}
	if err := n.del(ctx, cni, list, p); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if dels := a.requests(p.uid, zdstest.Del); len(dels) != 0 {
		t.Fatalf("ztunnel got %v for a pod outside the mesh", dels)
	}
}
