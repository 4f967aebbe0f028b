package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestIPv6NodeSettingLive: the ipv6 node setting applied while meshlet
// runs, with real namespaces, nftables and a ztunnel stand-in. Turned off,
// a running dual-stack pod is re-programmed for IPv4 alone (ztunnel gets
// its Del and a new Add); an IPv4-only pod is untouched; a running
// IPv6-only pod keeps its rules, and a restarted meshlet adopts it as it
// is; a new IPv6-only pod is refused, naming the setting. Turned on again,
// the dual-stack pod gets its IPv6 rules back.
func TestIPv6NodeSettingLive(t *testing.T) {
	privtest.RequireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	parts := realCore(ctx, t)
	zt := startZtunnel(ctx, t, parts)
	ambient := map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}
	pod := func(name string, ips ...string) enroll.Pod {
		addrs := make([]netip.Addr, len(ips))
		for i, ip := range ips {
			addrs[i] = netip.MustParseAddr(ip)
		}
		return enroll.Pod{UID: "uid-" + name, Name: name, Namespace: "app", Labels: ambient,
			NetnsPath: netnstest.NewWithAddrs(t, addrs...), IPs: addrs}
	}
	dual, v4only, v6only := pod("dual", "192.0.2.40", "2001:db8::40"), pod("v4only", "192.0.2.41"), pod("v6only", "2001:db8::41")
	for _, p := range []enroll.Pod{dual, v4only, v6only} {
		if _, err := parts.core.Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	wantIPv6Rules := func(p enroll.Pod, want bool, why string) {
		t.Helper()
		rules := podTable(t, p.NetnsPath)
		if !strings.Contains(rules, "redirect to :15001") {
			t.Fatalf("pod %s (%s): no redirection rules:\n%s", p.Name, why, rules)
		}
		if has := strings.Contains(rules, "ip6 daddr"); has != want {
			t.Fatalf("pod %s (%s): IPv6 rules present %t, want %t; rules:\n%s", p.Name, why, has, want, rules)
		}
	}
	wantIPv6Rules(dual, true, "ipv6 on")
	wantIPv6Rules(v4only, false, "no IPv6 address")
	wantIPv6Rules(v6only, true, "ipv6 on")

	cfg := DefaultConfig()
	var enrollTimeout atomic.Int64
	targets := settingsTargets{cfg: cfg, policy: parts.policy, core: parts.core, enrollTimeout: &enrollTimeout,
		ipv6Followers: []ipv6Follower{parts.redir}}
	setIPv6 := func(on bool) {
		t.Helper()
		v := flagValues(cfg)
		v.IPv6 = on
		targets.apply(ctx, v)
		if err := parts.core.Reevaluate(ctx); err != nil {
			t.Fatal(err)
		}
	}

	setIPv6(false)
	wantIPv6Rules(dual, false, "ipv6 turned off")
	if rec, _ := parts.core.Record(dual.UID); rec.Redirection != fmt.Sprintf("nftables/v%d ipv4 dns-capture inbound-capture", redirect.RulesVersion) {
		t.Fatalf("dual-stack pod's record after ipv6 off: %q", rec.Redirection)
	}
	// Re-programmed in its netns: ztunnel keeps the pod (an Add in the
	// same netns, no Del, which would drain it).
	wantRequests(t, zt, map[string]int{dual.UID: 2, v4only.UID: 1, v6only.UID: 1}, 0)
	wantIPv6Rules(v6only, true, "a running IPv6-only pod keeps its rules")
	if st, _ := parts.core.Status(v6only.UID); st.State != enroll.StateEnrolled {
		t.Fatalf("IPv6-only pod after ipv6 off: %s, want enrolled", st.State)
	}
	late := pod("late", "2001:db8::42")
	if _, err := parts.core.Enroll(ctx, late); err == nil || !strings.Contains(err.Error(), "ipv6 node setting") {
		t.Fatalf("Enroll of a new IPv6-only pod with ipv6 off = %v; want a refusal naming the ipv6 node setting", err)
	}
	if hasMeshletTable(t, late.NetnsPath) {
		t.Fatal("the refused IPv6-only pod has rules")
	}
	if err := parts.core.Forget(ctx, late.UID, late.SandboxID); err != nil { // the runtime removes the refused sandbox
		t.Fatal(err)
	}

	// A meshlet restarted with ipv6 off adopts the IPv6-only pod as the
	// previous one left it (ztunnel gets it, its rules stay).
	rec, ok := parts.core.Record(v6only.UID)
	if !ok {
		t.Fatal("no record of the IPv6-only pod")
	}
	restarted := realCoreWith(ctx, t, false, rec)
	zt2 := startZtunnel(ctx, t, restarted)
	if _, err := restarted.core.Reconcile(ctx, []enroll.Pod{v6only}); err != nil {
		t.Fatal(err)
	}
	if st, _ := restarted.core.Status(v6only.UID); st.State != enroll.StateEnrolled {
		t.Fatalf("IPv6-only pod after a restart with ipv6 off: %s (%s), want enrolled", st.State, st.Reason)
	}
	wantIPv6Rules(v6only, true, "adopted by a meshlet restarted with ipv6 off")
	wantRequests(t, zt2, map[string]int{v6only.UID: 1}, 0)

	setIPv6(true)
	wantIPv6Rules(dual, true, "ipv6 turned on again")
	wantRequests(t, zt, map[string]int{dual.UID: 3, v4only.UID: 1, v6only.UID: 1}, 0)
}

// startZtunnel connects a ztunnel stand-in to parts' ZDS server and waits
// for its first snapshot.
func startZtunnel(ctx context.Context, t *testing.T, parts realParts) *zdstest.Ztunnel {
	t.Helper()
	zt := &zdstest.Ztunnel{}
	if err := zt.Start(parts.server.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zt.Stop)
	waitCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if err := zt.WaitSnapshot(waitCtx); err != nil {
		t.Fatal(err)
	}
	return zt
}

// wantRequests checks the Adds ztunnel got of each pod, and its Dels.
func wantRequests(t *testing.T, zt *zdstest.Ztunnel, adds map[string]int, dels int) {
	t.Helper()
	// A running pod's Add goes out in the background: wait for the count.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = zt.WaitFor(ctx, func(rs []*zdstest.Request) bool { return zdstest.Count(rs, zdstest.Add) >= sum(adds) })
	got := map[string]int{}
	for _, r := range zt.Requests() {
		if r.Kind == zdstest.Add {
			got[r.UID]++
		}
	}
	for uid, n := range adds {
		if got[uid] != n {
			t.Fatalf("ztunnel got %d adds of %s, want %d (requests %v)", got[uid], uid, n, zt.Requests())
		}
	}
	if n := zdstest.Count(zt.Requests(), zdstest.Del); n != dels {
		t.Fatalf("ztunnel got %d dels, want %d (requests %v)", n, dels, zt.Requests())
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// podTable is the pod's meshlet table as nft lists it.
func podTable(t *testing.T, path string) string {
	t.Helper()
	h, err := netns.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	out, err := nftIn(t, h, "list", "table", "inet", redirect.TableName)
	if err != nil {
		t.Fatalf("pod table: %v\n%s", err, out)
	}
	return out
}
