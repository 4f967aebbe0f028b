package agent

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// BenchmarkEnrollSerial: pods enrolled one after another by the core with
// real parts: each pod's own network namespace, nftables rules in it and
// in the node's probe SNAT set, a real ZDS Add (netns fd, ack) to a
// ztunnel stand-in. Creating the namespaces is setup, outside the timer.
// Reports pods/s and this process's resident memory once 110 pods (the
// kubelet's default maxPods) and once all b.N pods are enrolled. The
// process is the test binary: the figure bounds the core's, it is not the
// daemon's (BenchmarkMeshletMemory in test/e2e measures the daemon).
func BenchmarkEnrollSerial(b *testing.B) {
	privtest.RequireRoot(b)
	ctx := klog.NewContext(context.Background(), logr.Discard())
	parts := realCore(ctx, b)
	core, server := parts.core, parts.server
	zt := &zdstest.Ztunnel{}
	if err := zt.Start(server.Addr()); err != nil {
		b.Fatal(err)
	}
	defer zt.Stop()
	if err := zt.WaitSnapshot(ctx); err != nil {
		b.Fatal(err)
	}
	ambient := map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}
	defer func() { _, _ = core.Reconcile(context.Background(), nil) }() // pods go before their namespaces
	var took time.Duration
	rss110 := 0.0
	i := 0
	for b.Loop() {
		b.StopTimer()
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		p := enroll.Pod{UID: fmt.Sprintf("uid-%d", i), SandboxID: fmt.Sprintf("sandbox-%d", i), Name: fmt.Sprintf("p-%d", i), Namespace: "app", Labels: ambient,
			NetnsPath: netnstest.NewWithAddrs(b, ip), IPs: []netip.Addr{ip}}
		b.StartTimer()
		start := time.Now()
		if _, err := core.Enroll(ctx, p); err != nil {
			b.Fatalf("enroll pod %d: %v", i, err)
		}
		took += time.Since(start)
		i++
		if i == 110 {
			rss110 = rssMiB(b)
		}
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), "pods/s")
	if rss110 > 0 {
		b.ReportMetric(rss110, "MiB-rss-at-110")
	}
	b.ReportMetric(rssMiB(b), fmt.Sprintf("MiB-rss-at-%d", b.N))
}

// rssMiB is this process's resident set (VmRSS), in MiB.
func rssMiB(b *testing.B) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
