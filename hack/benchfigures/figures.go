package main

import "fmt"

// A figure is one line of the table: its value from the results, and the
// goal it is held to.
type figure struct {
	name  string
	goal  string
	value func(results) (string, bool)
}

const (
	applyNftables = "BenchmarkApplyNftables"
	istioRules    = "BenchmarkIstioCreateInpodRules"
	hookEnroll    = "BenchmarkRunPodSandbox/runtime=containerd/meshlet=host"
)

var figures = []figure{
	{"nftables Apply, mean / p50 (BenchmarkApplyNftables)", "≤ 0.5 ms", func(r results) (string, bool) {
		mean, ok1 := r.median(applyNftables, "ns/op")
		p50, ok2 := r.median(applyNftables, "p50-µs")
		return fmt.Sprintf("%.2f / %.2f ms", mean/1e6, p50/1e3), ok1 && ok2
	}},
	{"Istio's CreateInpodRules, mean / p50, same run", "", func(r results) (string, bool) {
		mean, ok1 := r.median(istioRules, "ns/op")
		p50, ok2 := r.median(istioRules, "p50-µs")
		return fmt.Sprintf("%.2f / %.2f ms", mean/1e6, p50/1e3), ok1 && ok2
	}},
	{"  meshlet faster by, mean / p50", "≥ 20×", func(r results) (string, bool) {
		m, ok1 := r.median(applyNftables, "ns/op")
		im, ok2 := r.median(istioRules, "ns/op")
		p, ok3 := r.median(applyNftables, "p50-µs")
		ip, ok4 := r.median(istioRules, "p50-µs")
		return fmt.Sprintf("%.1f× / %.1f×", im/m, ip/p), ok1 && ok2 && ok3 && ok4
	}},
	memory("daemon VmRSS, API server, 100 pods", "BenchmarkMeshletMemory/api/pods=100", "≤ 32 MiB"),
	memory("daemon VmRSS, API server, 1,000 pods", "BenchmarkMeshletMemory/api/pods=1000", "≤ 64 MiB"),
	memory("daemon VmRSS, standalone, 100 pods", "BenchmarkMeshletMemory/standalone/pods=100", ""),
	{"enroll in the NRI hook, p50 / p99 (containerd 2.x)", "≤ 1 / ≤ 3 ms", func(r results) (string, bool) {
		p50, ok1 := r.median(hookEnroll, "enroll-p50-ms")
		p99, ok2 := r.median(hookEnroll, "enroll-p99-ms")
		return fmt.Sprintf("%.2f / %.2f ms", p50, p99), ok1 && ok2
	}},
	{"stripped meshlet binary", "", func(r results) (string, bool) {
		b, ok := r.median("BenchmarkStrippedBinary/meshlet", "bytes")
		return fmt.Sprintf("%.1f MB", b/1e6), ok
	}},
}

// memory is the figure of a BenchmarkMeshletMemory case: VmRSS, then its
// anonymous and file-backed parts.
func memory(name, bench, goal string) figure {
	return figure{name + " (RssAnon + RssFile)", goal, func(r results) (string, bool) {
		rss, ok1 := r.median(bench, "VmRSS-MiB")
		anon, ok2 := r.median(bench, "RssAnon-MiB")
		file, ok3 := r.median(bench, "RssFile-MiB")
		return fmt.Sprintf("%.1f MiB (%.1f + %.1f)", rss, anon, file), ok1 && ok2 && ok3
	}}
}
