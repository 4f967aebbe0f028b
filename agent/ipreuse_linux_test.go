package agent

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/policy"
)

// TestTwoPodsReuseOneIP: the runtime hands a stopped pod's IP to a new
// pod before meshlet learns the first is gone (its removal was missed, or
// is still on its way). Both are enrolled with the address for a while;
// forgetting the stale one leaves the live pod's probe SNAT entry on the
// node (kubelet probes to it still bypass ztunnel's capture), and the
// entry goes with the last pod that holds it. Real namespaces, real
// nftables, the real core.
func TestTwoPodsReuseOneIP(t *testing.T) {
	ctx := context.Background()
	parts := realCore(ctx, t)
	ambient := map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.40")}
	stale := enroll.Pod{UID: "uid-stale", SandboxID: "sb-stale", Name: "stale", Namespace: "app", Labels: ambient,
		NetnsPath: netnstest.NewWithAddrs(t, ip...), IPs: ip}
	live := enroll.Pod{UID: "uid-live", SandboxID: "sb-live", Name: "live", Namespace: "app", Labels: ambient,
		NetnsPath: netnstest.NewWithAddrs(t, ip...), IPs: ip}
	for _, p := range []enroll.Pod{stale, live} {
		if res, err := parts.core.EnrollRunning(ctx, p); err != nil || !res.Enrolled {
			t.Fatalf("enroll %s: %+v, %v", p.Name, res, err)
		}
	}
	if err := parts.core.Forget(ctx, stale.UID, stale.SandboxID); err != nil {
		t.Fatal(err)
	}
	if set := nodeSNATSet(t, parts.node); !strings.Contains(set, "192.0.2.40") {
		t.Fatalf("forgetting the stale pod took the live pod's probe SNAT entry:\n%s", set)
	}
	if err := parts.core.Forget(ctx, live.UID, live.SandboxID); err != nil {
		t.Fatal(err)
	}
	if set := nodeSNATSet(t, parts.node); strings.Contains(set, "192.0.2.40") {
		t.Fatalf("the address outlived both pods in the probe SNAT set:\n%s", set)
	}
}
