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
// its Del and a new Add); a running IPv6-only pod keeps its rules; a new
// IPv6-only pod is refused, naming the setting. Turned on again, the
// dual-stack pod gets its IPv6 rules back.
func TestIPv6NodeSettingLive(t *testing.T) {
	privtest.RequireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	parts := realCore(ctx, t)
	zt := &zdstest.Ztunnel{}
	if err := zt.Start(parts.server.Addr()); err != nil {
		t.Fatal(err)
	}
	defer zt.Stop()
	waitCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if err := zt.WaitSnapshot(waitCtx); err != nil {
		t.Fatal(err)
	}
	ambient := map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}
	pod := func(name string, ips ...string) enroll.Pod {
		addrs := make([]netip.Addr, len(ips))
		for i, ip := range ips {
			addrs[i] = netip.MustParseAddr(ip)
		}
		return enroll.Pod{UID: "uid-" + name, Name: name, Namespace: "app", Labels: ambient,
			NetnsPath: netnstest.NewWithAddrs(t, addrs...), IPs: addrs}
	}
	dual, v6only := pod("dual", "192.0.2.40", "2001:db8::40"), pod("v6only", "2001:db8::41")
	for _, p := range []enroll.Pod{dual, v6only} {
		if _, err := parts.core.Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	wantIPv6Rules := func(p enroll.Pod, want bool, why string) {
		t.Helper()
		rules := podTable(t, p.NetnsPath)
		if !strings.Contains(rules, "redirect to :15001") || strings.Contains(rules, "ip6 daddr") != want {
			t.Fatalf("pod %s (%s): IPv6 rules present %t; rules:\n%s", p.Name, why, !want, rules)
		}
	}
	wantIPv6Rules(dual, true, "ipv6 on")
	wantIPv6Rules(v6only, true, "ipv6 on")
	adds := func(uid string) int {
		n := 0
		for _, r := range zt.Requests() {
			if r.Kind == zdstest.Add && r.UID == uid {
				n++
			}
		}
		return n
	}

	cfg := DefaultConfig()
	var enrollTimeout atomic.Int64
	targets := settingsTargets{cfg: cfg, policy: parts.policy, core: parts.core, enrollTimeout: &enrollTimeout,
		ipv6: []ipv6Setting{parts.redir}}
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
	if n := adds(dual.UID); n != 2 || zdstest.Count(zt.Requests(), zdstest.Del) != 1 {
		t.Fatalf("ztunnel got %d adds of the dual-stack pod and %d dels; want it re-added once (2 adds, 1 del): %v", n, zdstest.Count(zt.Requests(), zdstest.Del), zt.Requests())
	}
	wantIPv6Rules(v6only, true, "a running IPv6-only pod keeps its rules")
	if st, _ := parts.core.Status(v6only.UID); st.State != enroll.StateEnrolled || adds(v6only.UID) != 1 {
		t.Fatalf("IPv6-only pod after ipv6 off: %s, %d adds; want enrolled, untouched", st.State, adds(v6only.UID))
	}
	late := pod("late", "2001:db8::42")
	if _, err := parts.core.Enroll(ctx, late); err == nil || !strings.Contains(err.Error(), "ipv6 node setting") {
		t.Fatalf("Enroll of a new IPv6-only pod with ipv6 off = %v; want a refusal naming the ipv6 node setting", err)
	}
	if hasMeshletTable(t, late.NetnsPath) {
		t.Fatal("the refused IPv6-only pod has rules")
	}

	setIPv6(true)
	wantIPv6Rules(dual, true, "ipv6 turned on again")
	if n := adds(dual.UID); n != 3 {
		t.Fatalf("ztunnel got %d adds of the dual-stack pod, want 3", n)
	}
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
