package redirect

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/latency"
)

// Benchmarks on real namespaces: a dual-stack pod with DNS capture, the
// common case. Each reports p50/p99 besides the mean.

func benchWorkload(b *testing.B) *enroll.Workload {
	return podWorkload(podNetns(b), []netip.Addr{podV4, podV6}, enroll.Settings{DNSCapture: true})
}

// freshPod makes a new pod netns with lo up, outside the timer: Apply's
// real case is a sandbox the runtime just created.
func freshPod(b *testing.B, dir string, i int) (*netns.Handle, func()) {
	b.StopTimer()
	defer b.StartTimer()
	path := filepath.Join(dir, fmt.Sprint(i))
	must(b, netnstest.Create(path))
	h, err := netns.Open(path)
	must(b, err)
	nh, err := netlink.NewHandleAt(vnetns.NsHandle(netnstest.Fd(b, h)), unix.NETLINK_ROUTE)
	must(b, err)
	lo, err := nh.LinkByName("lo")
	must(b, err)
	must(b, nh.LinkSetUp(lo))
	nh.Close()
	return h, func() {
		b.StopTimer()
		defer b.StartTimer()
		_ = h.Close()
		must(b, netnstest.Destroy(path))
	}
}

// benchApply measures Apply (routing, in-pod rules, node SNAT) of a
// dual-stack pod with DNS capture, each time in a new pod netns.
func benchApply(b *testing.B, be Backend) {
	r := newBareRedirector(b, be)
	dir := b.TempDir()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		pod, done := freshPod(b, dir, i)
		i++
		w := podWorkload(pod, []netip.Addr{podV4, podV6}, enroll.Settings{DNSCapture: true})
		start := time.Now()
		if err := apply(r, w); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		done()
	}
	latency.Report(b, lat)
}

// benchReapply measures Apply over the pod's existing rules (a changed
// annotation, a restarted agent's Reconcile): the replacing path.
func benchReapply(b *testing.B, be Backend) {
	r := newBareRedirector(b, be)
	w := benchWorkload(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := apply(r, w); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	latency.Report(b, lat)
}

// benchReprogram measures the re-program of a running pod as the core
// makes it: Apply of new settings (DNS capture turned off, then on again)
// with the pod's current record as prior, the rules replaced in place.
func benchReprogram(b *testing.B, be Backend) {
	r := newBareRedirector(b, be)
	w := benchWorkload(b)
	account, err := r.Apply(context.Background(), w, nil)
	must(b, err)
	current := w.Record
	current.Redirection = account
	var lat []time.Duration
	for b.Loop() {
		next := *w
		next.Settings.DNSCapture = !current.Settings.DNSCapture
		start := time.Now()
		account, err := r.Apply(context.Background(), &next, &current)
		lat = append(lat, time.Since(start))
		must(b, err)
		current = next.Record
		current.Redirection = account
	}
	latency.Report(b, lat)
}

// benchRemove measures Remove (RemoveAll: in-pod rules, routing, node SNAT)
// of an applied pod; the Apply between removals is not timed.
func benchRemove(b *testing.B, be Backend) {
	r := newBareRedirector(b, be)
	w := benchWorkload(b)
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := apply(r, w); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := r.Remove(ctx, w, enroll.RemoveAll); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	latency.Report(b, lat)
}

func BenchmarkApplyNftables(b *testing.B)     { benchApply(b, BackendNftables) }
func BenchmarkApplyIptables(b *testing.B)     { benchApply(b, BackendIptables) }
func BenchmarkReapplyNftables(b *testing.B)   { benchReapply(b, BackendNftables) }
func BenchmarkReapplyIptables(b *testing.B)   { benchReapply(b, BackendIptables) }
func BenchmarkReprogramNftables(b *testing.B) { benchReprogram(b, BackendNftables) }
func BenchmarkReprogramIptables(b *testing.B) { benchReprogram(b, BackendIptables) }
func BenchmarkRemoveNftables(b *testing.B)    { benchRemove(b, BackendNftables) }
func BenchmarkRemoveIptables(b *testing.B)    { benchRemove(b, BackendIptables) }

// BenchmarkApplyParts: where Apply's time goes, each part alone on a new
// pod (dual-stack, DNS capture), as BenchmarkApplyNftables runs them
// together (routing and the rules concurrently, the node SNAT beside):
//   - sockets: entering the pod's namespace once for its netlink sockets;
//   - routing: the ip rule and local route of each family;
//   - nft-batch: the table, chains and rules in one transaction;
//   - host-snat: the pod's addresses into the node's probe SNAT sets.
func BenchmarkApplyParts(b *testing.B) {
	r := newBareRedirector(b, BackendNftables)
	ips := []netip.Addr{podV4, podV6}
	p, err := PlanFor(ips, enroll.Settings{DNSCapture: true}, true)
	must(b, err)
	// Each part but "sockets" gets the pod's sockets, opened untimed.
	parts := []struct {
		name string
		run  func(fd int, s *podSockets, uid string) error
	}{
		{"sockets", func(fd int, _ *podSockets, _ string) error {
			s, err := openPodSockets(fd, true)
			if err == nil {
				s.close()
			}
			return err
		}},
		{"routing", func(_ int, s *podSockets, _ string) error { return s.routing().apply(p.Families) }},
		{"nft-batch", func(_ int, s *podSockets, _ string) error { return applyNftablesOn(s.nft, p) }},
		{"host-snat", func(_ int, _ *podSockets, uid string) error { return r.probe.add(uid, ips) }},
	}
	for _, part := range parts {
		b.Run(part.name, func(b *testing.B) {
			dir := b.TempDir()
			var lat []time.Duration
			i := 0
			for b.Loop() {
				pod, done := freshPod(b, dir, i)
				i++
				uid := fmt.Sprint("pod-", i)
				must(b, pod.WithFd(func(fd int) error {
					b.StopTimer()
					s, err := openPodSockets(fd, true)
					if err != nil {
						return err
					}
					defer s.close()
					b.StartTimer()
					start := time.Now()
					err = part.run(fd, s, uid)
					lat = append(lat, time.Since(start))
					return err
				}))
				if part.name == "host-snat" {
					b.StopTimer()
					must(b, r.probe.delete(uid, ips))
					b.StartTimer()
				}
				done()
			}
			latency.Report(b, lat)
		})
	}
}

// BenchmarkHostSNATUpdate: one pod's addresses (IPv4 + IPv6) added to the
// node's probe SNAT sets, then deleted; each op is one update.
func BenchmarkHostSNATUpdate(b *testing.B) {
	benchHostSNATUpdate(b, 0)
}

// BenchmarkHostSNATUpdateAt1000: the same with 1,000 pods' addresses
// already in the sets, as on a full node.
func BenchmarkHostSNATUpdateAt1000(b *testing.B) {
	benchHostSNATUpdate(b, 1000)
}

func benchHostSNATUpdate(b *testing.B, others int) {
	r := newBareRedirector(b, BackendNftables)
	for i := range others {
		v6 := netip.MustParseAddr(fmt.Sprintf("fd00:10:2::%x", i+1))
		if err := r.host.Add([]netip.Addr{netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), v6}); err != nil {
			b.Fatal(err)
		}
	}
	ips := []netip.Addr{podV4, podV6}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := r.host.Add(ips); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := r.host.Delete(ips); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, mid.Sub(start), time.Since(mid))
	}
	latency.Report(b, lat)
}

// BenchmarkAccount: what re-deciding an enrolled pod (the CreateContainer
// gate, Synchronize, the watchers) now adds to the no-op path: the
// account the redirector would give the pod, compared with its record's.
func BenchmarkAccount(b *testing.B) {
	r := &Redirector{cfg: DefaultConfig()}
	r.ipv6.Store(true)
	r.fillAccounts()
	rec := &enroll.Record{IPs: []netip.Addr{podV4, podV6}, Settings: enroll.Settings{DNSCapture: true}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Account(rec); err != nil {
			b.Fatal(err)
		}
	}
}
