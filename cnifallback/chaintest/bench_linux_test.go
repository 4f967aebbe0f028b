package chaintest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/latency"
)

// BenchmarkChainAdd measures a pod's ADD through the pod network's chain
// (bridge with host-local) without and with meshlet-cni at its end, the
// pod enrolled for real (rules in its namespace, ztunnel's ack), and with
// the smallest Go chained plugin there instead (testdata/passthrough): the
// floor of starting any Go plugin process on the machine. Each iteration
// is a new pod; its namespace's creation, DEL and destruction are not
// timed. meshlet-cni's cost is the difference of the p50s (its target:
// 5 ms); what it adds beyond the passthrough is its own work.
func BenchmarkChainAdd(b *testing.B) {
	const v = "1.0.0" // the newest Debian's plugins speak
	for _, last := range []string{"", passthrough, "meshlet-cni"} {
		with := last == "meshlet-cni"
		name := map[string]string{"": "without-meshlet", passthrough: "with-go-passthrough", "meshlet-cni": "with-meshlet"}[last]
		b.Run(name, func(b *testing.B) {
			n := newNode(b)
			cni := n.cni(pluginDir(b, v))
			var a *agent
			var meshlet map[string]any
			switch last {
			case "meshlet-cni":
				a = startAgent(b, n)
				meshlet = a.meshlet(nil)
			case passthrough:
				meshlet = map[string]any{"type": passthrough}
			}
			list := n.conflist(b, v, meshlet)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			dir := b.TempDir()
			seq := 0
			var plugin []time.Duration
			// one ADDs a new pod and returns how long the ADD took; the
			// rest is set-up and clean-up.
			one := func() time.Duration {
				b.StopTimer()
				seq++
				path := filepath.Join(dir, fmt.Sprintf("pod%d", seq))
				if err := netnstest.Create(path); err != nil {
					b.Fatal(err)
				}
				defer func() {
					if err := netnstest.Destroy(path); err != nil {
						b.Fatal(err)
					}
				}()
				p := podAt(meshNS, fmt.Sprintf("bench-%d", seq), path)
				b.StartTimer()
				_, took, err := n.add(ctx, cni, list, p)
				b.StopTimer()
				if err != nil {
					b.Fatalf("ADD: %v", err)
				}
				if with {
					adds := a.requests(p.uid, zdstest.Add)
					if len(adds) != 1 {
						b.Fatalf("the pod was not enrolled: ztunnel got %v", adds)
					}
					adds[0].Close() // the stand-in's copy: the namespace may go
				}
				if err := n.del(ctx, cni, list, p); err != nil {
					b.Fatalf("DEL: %v", err)
				}
				if last != "" {
					plugin = append(plugin, n.exec.last(b, last, "ADD").took)
				}
				n.exec.forget()
				return took
			}
			one() // the bridge is created by the first ADD: not a pod's cost
			lat := make([]time.Duration, 0, b.N)
			plugin = plugin[:0]
			if with {
				a.core.enrollTimes()
			}
			b.ResetTimer()
			for range b.N {
				lat = append(lat, one())
			}
			latency.Report(b, lat)
			if last != "" {
				// The last plugin's own run (exec to exit), as libcni
				// timed it: the cost the p50s' difference shows, without
				// the noise of two runs.
				b.ReportMetric(p50(plugin), "plugin-p50-µs")
			}
			if with {
				// The agent's enrollment inside meshlet-cni's run.
				b.ReportMetric(p50(a.core.enrollTimes()), "enroll-p50-µs")
			}
		})
	}
}

func p50(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2]) / 1e3
}
