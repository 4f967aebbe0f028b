// Command istiorules times Istio's own in-pod rule path, CreateInpodRules
// from istio.io/istio/cni/pkg/iptables (the code istio-cni's node agent
// runs for every pod it meshes: iptables-restore in the pod's namespace,
// then its loopback route and mark rule), on a new network namespace each
// time, and prints the result as a Go benchmark line, so that benchstat
// and make bench read it beside meshlet's BenchmarkApplyNftables.
//
// It builds in Istio's module, not meshlet's (test/env/install-istio-rules.sh):
// this directory is testdata to the meshlet module.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"istio.io/istio/cni/pkg/config"
	"istio.io/istio/cni/pkg/iptables"
	"istio.io/istio/cni/pkg/scopes"
	istiolog "istio.io/istio/pkg/log"
	dep "istio.io/istio/tools/istio-iptables/pkg/dependencies"
)

func main() { os.Exit(run()) }

func run() int {
	n := flag.Int("n", 100, "pods (new network namespaces) to program")
	count := flag.Int("count", 1, "benchmark lines to print")
	flag.Parse()
	// As istio-cni's node agent runs it for an ambient pod: dual-stack,
	// DNS captured, the probe SNAT addresses its chart sets.
	cfg := &config.AmbientConfig{
		EnableIPv6:             true,
		RedirectDNS:            true,
		HostProbeSNATAddress:   netip.MustParseAddr("169.254.7.127"),
		HostProbeV6SNATAddress: netip.MustParseAddr("fd16:9254:7127:1337:ffff:ffff:ffff:ffff"),
	}
	// Warnings only: its info lines print every restore input, which
	// would put the cost of writing them in Istio's figure.
	scopes.CNIAgent.SetOutputLevel(istiolog.WarnLevel)
	deps := &dep.RealDependencies{}
	_, pod, err := iptables.NewIptablesConfigurator(cfg, cfg, deps, deps, iptables.RealNlDeps())
	if err != nil {
		fmt.Fprintln(os.Stderr, "istiorules:", err)
		return 1
	}
	for range *count {
		lat := make([]time.Duration, 0, *n)
		for range *n {
			took, err := inNewNetns(func() error {
				return pod.CreateInpodRules(scopes.CNIAgent, config.PodLevelOverrides{})
			})
			if err != nil {
				fmt.Fprintln(os.Stderr, "istiorules: CreateInpodRules:", err)
				return 1
			}
			lat = append(lat, took)
		}
		var total time.Duration
		for _, d := range lat {
			total += d
		}
		slices.Sort(lat)
		q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
		fmt.Printf("BenchmarkIstioCreateInpodRules-%d\t%d\t%d ns/op\t%.1f p50-µs\t%.1f p99-µs\n",
			runtime.GOMAXPROCS(0), len(lat), total.Nanoseconds()/int64(len(lat)), q(0.5), q(0.99))
	}
	return 0
}

// inNewNetns runs fn, timed, on a locked thread moved into a new network
// namespace with lo up (a pod's, as the runtime hands it over). The thread
// is never unlocked: the runtime discards it, and the namespace with it.
func inNewNetns(fn func() error) (time.Duration, error) {
	type result struct {
		took time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("unshare: %w", err)}
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			done <- result{err: fmt.Errorf("lo up: %w", err)}
			return
		}
		start := time.Now()
		err = fn()
		done <- result{took: time.Since(start), err: err}
	}()
	r := <-done
	return r.took, r.err
}
