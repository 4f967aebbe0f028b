package kube_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/internal/latency"
)

// BenchmarkResolveCached: a pod and namespace from the informer caches, the
// path every RunPodSandbox of a scheduled pod takes.
func BenchmarkResolveCached(b *testing.B) {
	c := admin(b)
	ns := namespace(b, c, ambient)
	p := boundPod(b, c, ns, "bench", "bench-sa", nil)
	w, ctx := startWatcher(b, c)
	sb := sandbox(p)
	eventually(b, "pod in the informer", func() bool {
		_, err := w.Resolve(ctx, &sb)
		return err == nil && w.Fallbacks.Load() == 0
	})
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		info, err := w.Resolve(ctx, &sb)
		lat = append(lat, time.Since(start))
		if err != nil || info.ServiceAccount != "bench-sa" {
			b.Fatalf("Resolve = %+v, %v", info, err)
		}
	}
	latency.Report(b, lat)
}

// BenchmarkResolveAPIDown: the worst case inside a runtime hook: a pod the
// informer never saw, with the API server stopped. Bounded by the GET
// timeout (300 ms), far inside the hook's 1.5 s.
func BenchmarkResolveAPIDown(b *testing.B) {
	c := admin(b)
	ns := namespace(b, c, nil)
	w, ctx := startWatcher(b, c)
	must(b, api(b).StopAPIServer())
	defer func() { must(b, api(b).StartAPIServer()) }()
	sb := enroll.Pod{UID: "never-seen", Name: "ghost", Namespace: ns}
	var lat []time.Duration
	for b.Loop() {
		hook, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		start := time.Now()
		info, err := w.Resolve(hook, &sb)
		lat = append(lat, time.Since(start))
		cancel()
		if err != nil || info.ServiceAccount != enroll.DefaultServiceAccount {
			b.Fatalf("Resolve = %+v, %v", info, err)
		}
	}
	latency.Report(b, lat)
}
