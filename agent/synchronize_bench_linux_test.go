package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
)

// BenchmarkSynchronizeAdopts: a restarted meshlet adopts the node's running
// pods at the runtime's Synchronize (the core's Reconcile, which is what
// the NRI plugin's Synchronize runs), with real parts: each pod's own
// network namespace holding the previous meshlet's rules, that meshlet's
// records as the checkpoint, a real ZDS server resumed from them, and a
// ztunnel stand-in (zdstest.State) that holds every pod's proxy from before
// the restart and answers each request 2 ms after it arrives. Each
// iteration is one restart. It reports the Synchronize's time
// (ms-synchronize: under the runtime's 2 s deadline), the time from its
// start until ztunnel has every pod's Add (ms-all-handed-over), and fails
// if ztunnel drained or restarted any pod's proxy.
func BenchmarkSynchronizeAdopts(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) { benchSynchronize(b, n) })
	}
}

func benchSynchronize(b *testing.B, n int) {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	first := realCore(ctx, b)
	ztState := &zdstest.State{}
	defer ztState.Close()
	zt := &zdstest.Ztunnel{State: ztState}
	if err := zt.Start(first.server.Addr()); err != nil {
		b.Fatal(err)
	}
	if err := zt.WaitSnapshot(ctx); err != nil {
		b.Fatal(err)
	}
	ambient := map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}
	pods := make([]enroll.Pod, n)
	uids := make([]string, n)
	for i := range pods {
		ip := netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)})
		pods[i] = enroll.Pod{UID: fmt.Sprintf("uid-%d", i), SandboxID: fmt.Sprintf("sandbox-%d", i), Name: fmt.Sprintf("p-%d", i), Namespace: "app", Labels: ambient,
			NetnsPath: netnstest.NewWithAddrs(b, ip), IPs: []netip.Addr{ip}}
		uids[i] = pods[i].UID
		if _, err := first.core.Enroll(ctx, pods[i]); err != nil {
			b.Fatalf("enroll pod %d: %v", i, err)
		}
	}
	records, _ := first.core.Records()
	zt.Stop() // the previous meshlet goes; ztunnel keeps its proxies
	if len(ztState.Proxies()) != n {
		b.Fatalf("ztunnel runs %d proxies before the restart, want %d", len(ztState.Proxies()), n)
	}

	var synchronize, handedOver time.Duration
	for b.Loop() {
		b.StopTimer()
		next := realCoreWith(ctx, b, redirect.DefaultConfig().IPv6, records...)
		next.server.Resume(state.UIDs(records), next.core.Listed())
		again := &zdstest.Ztunnel{State: ztState, Decide: func(*zdstest.Request) string {
			time.Sleep(2 * time.Millisecond)
			return ""
		}}
		if err := again.Start(next.server.Addr()); err != nil {
			b.Fatal(err)
		}
		for next.server.Connections() != 1 {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := next.core.Reconcile(ctx, pods); err != nil {
			b.Fatal(err)
		}
		synchronize += time.Since(start)
		b.StopTimer()
		if err := again.WaitFor(ctx, func(rs []*zdstest.Request) bool {
			return zdstest.Count(rs, zdstest.SnapshotSent) == 1 && zdstest.Count(rs, zdstest.Add) == n
		}); err != nil {
			b.Fatal(err)
		}
		handedOver += time.Since(start)
		if d := ztState.Disruptions(uids...); len(d) > 0 {
			b.Fatalf("the restart disrupted %d pods:\n%s", len(d), strings.Join(d, "\n"))
		}
		// This meshlet goes too, leaving the pods' rules for the next.
		again.Stop()
		for next.server.Connections() != 0 {
			time.Sleep(time.Millisecond)
		}
		for _, p := range pods {
			if err := next.core.Release(ctx, p.UID, p.SandboxID); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(synchronize.Milliseconds())/float64(b.N), "ms-synchronize")
	b.ReportMetric(float64(handedOver.Milliseconds())/float64(b.N), "ms-all-handed-over")
}
