package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/test/env"
)

// soakSample is meshlet seen after some create/delete cycles.
type soakSample struct {
	cycles     int
	rssKiB     int // VmRSS
	anonKiB    int // RssAnon: what meshlet allocated
	goroutines int
	fds        int
	snat       int // addresses in the node's probe SNAT set
	pods       int // pods the core holds as enrolled
}

// BenchmarkSoak creates and removes a pod through the real runtime b.N
// times (every other one a mesh pod) and samples meshlet every 100 cycles;
// between samples ztunnel reconnects (its stand-in would otherwise keep
// every namespace it was given). The series is printed. From 12 samples
// on it is judged, after a warm-up of the first quarter: the
// node's probe SNAT entries and the enrolled pods are 0 at every sample,
// descriptors and goroutines end where the judged part began, and
// meshlet's allocated memory (RssAnon, median of the judged part's last
// third) is within noise (the larger of 2 MiB and 10%) of its first
// third's. `make soak` runs 2,000 cycles.
func BenchmarkSoak(b *testing.B) {
	m := startMesh(b, "--standalone", "--cri-resync-interval=1s")
	pid := m.meshlet.Pid()
	take := func(cycles int) soakSample {
		s := soakSample{cycles: cycles}
		var err error
		if s.rssKiB, err = procStatus(pid, "VmRSS"); err != nil {
			b.Fatal(err)
		}
		if s.anonKiB, err = procStatus(pid, "RssAnon"); err != nil {
			b.Fatal(err)
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			b.Fatal(err)
		}
		s.fds = len(fds)
		_, page, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
		if err != nil {
			b.Fatal(err)
		}
		g, _ := metricValue(page, "go_goroutines")
		p, _ := metricValue(page, "meshlet_enrolled_pods")
		s.goroutines, s.pods = int(g), int(p)
		set, err := theEnv(b).Exec("nft", "list", "set", "inet", "meshlet", "probe-pods-v4")
		if err != nil {
			b.Fatalf("the node's probe SNAT set: %v: %s", err, set)
		}
		s.snat = setElements(set)
		return s
	}

	const every = 100 // cycles between samples
	samples := []soakSample{take(0)}
	i := 0
	for b.Loop() {
		spec := env.PodSpec{Name: fmt.Sprintf("soak-%d", i), Namespace: "app", UID: fmt.Sprintf("soak-%d-%d", time.Now().UnixNano(), i)}
		if i%2 == 0 {
			spec.Labels = ambient
		}
		id, err := theEnv(b).RunPod(spec)
		if err != nil {
			b.Fatalf("cycle %d: %v", i, err)
		}
		if err := theEnv(b).StopPod(id); err != nil {
			b.Fatal(err)
		}
		if err := theEnv(b).RemovePod(id); err != nil {
			b.Fatal(err)
		}
		i++
		if i%every == 0 {
			b.StopTimer()
			m.zt.Stop()
			m.connectZtunnel()
			// The old connection's descriptor goes once meshlet reads its end.
			for deadline := time.Now().Add(5 * time.Second); m.metric("meshlet_ztunnel_connections") != 1; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatal("meshlet still has the previous ztunnel connection 5 s after it closed")
				}
			}
			samples = append(samples, take(i))
			b.StartTimer()
		}
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%8s %9s %9s %10s %5s %5s %5s\n", "cycles", "rss-KiB", "anon-KiB", "goroutines", "fds", "snat", "pods")
	for _, s := range samples {
		fmt.Fprintf(&table, "%8d %9d %9d %10d %5d %5d %5d\n", s.cycles, s.rssKiB, s.anonKiB, s.goroutines, s.fds, s.snat, s.pods)
	}
	b.Logf("meshlet over %d pod create/delete cycles:\n%s", i, table.String())
	last := samples[len(samples)-1]
	b.ReportMetric(float64(last.anonKiB)/1024, "anon-MiB-at-end")
	b.ReportMetric(float64(last.fds-samples[0].fds), "fds-gained")

	for _, s := range samples {
		if s.snat != 0 || s.pods != 0 {
			b.Errorf("after %d cycles, with no pod running: %d probe SNAT entries and %d enrolled pods, want 0", s.cycles, s.snat, s.pods)
		}
	}
	if len(samples) < 12 {
		b.Logf("%d cycles: too few to judge the series (%d or more are)", i, 11*every)
		return
	}
	judged := samples[len(samples)/4:]
	first := judged[0]
	if last.fds > first.fds {
		b.Errorf("open descriptors grew from %d to %d over %d cycles", first.fds, last.fds, last.cycles-first.cycles)
	}
	// A few goroutines come and go with timers and connections.
	if last.goroutines > first.goroutines+3 {
		b.Errorf("goroutines grew from %d to %d over %d cycles", first.goroutines, last.goroutines, last.cycles-first.cycles)
	}
	q := len(judged) / 3
	early, late := medianAnon(judged[:q]), medianAnon(judged[len(judged)-q:])
	if noise := max(2048, early/10); late > early+noise {
		b.Errorf("allocated memory grew from a median %d KiB to %d KiB (noise: %d KiB)", early, late, noise)
	}
}

func medianAnon(ss []soakSample) int {
	v := make([]int, 0, len(ss))
	for _, s := range ss {
		v = append(v, s.anonKiB)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// setElements counts the elements `nft list set` prints.
func setElements(out string) int {
	_, rest, ok := strings.Cut(out, "elements = {")
	if !ok {
		return 0
	}
	body, _, _ := strings.Cut(rest, "}")
	return strings.Count(body, ",") + 1
}
