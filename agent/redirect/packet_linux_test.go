package redirect

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// wait bounds each packet's arrival; only a failure waits for it whole. It
// is generous because make test runs these tests beside the end-to-end
// tests on a loaded machine: a SYN lost while a neighbour is resolved is
// sent again after 1 s, then 3 s more.
const wait = 15 * time.Second

// backends under test; "iptables-legacy" is the iptables backend with the
// legacy variant (test-only name).
var backends = []Backend{BackendNftables, BackendIptables, backendIptablesLegacy}

const backendIptablesLegacy Backend = "iptables-legacy"

type famCase struct {
	name            string
	host, pod, peer netip.Addr
	probe           netip.Addr
	ips             []netip.Addr
}

var famCases = []famCase{
	{"ipv4", hostV4, podV4, peerV4, ProbeAddrV4, []netip.Addr{podV4}},
	{"ipv6", hostV6, podV6, peerV6, ProbeAddrV6, []netip.Addr{podV6}},
}

func hp(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// TestPackets proves the rules with real traffic between a host netns and
// a pod netns, for each backend and family.
func TestPackets(t *testing.T) {
	// Every subtest needs root: without it the test itself skips, rather
	// than passing with nothing run.
	privtest.RequireRoot(t)
	for _, b := range backends {
		for _, fc := range famCases {
			t.Run(string(b)+"/"+fc.name, func(t *testing.T) {
				topo := newTopology(t)
				r := topo.newRedirector(t, b)
				w := topo.workload(fc.ips, enroll.Settings{DNSCapture: true})
				must(t, apply(r, w))

				inbound := listen(t, topo.pod, "tcp", ":15006")
				outbound := listen(t, topo.pod, "tcp", ":15001")
				app := listen(t, topo.pod, "tcp", ":8080")
				dns := listenUDP(t, topo.pod, ":15053")
				hostSvc := listen(t, topo.host, "tcp", hp(fc.host, 9999))

				t.Run("inbound lands on 15006 with original destination", func(t *testing.T) {
					c, err := dial(topo.peer, "tcp", hp(fc.pod, 8080), netip.Addr{}, 0)
					must(t, err)
					defer c.Close()
					got, err := netnstest.Accept(inbound, wait)
					must(t, err)
					defer got.Close()
					od, err := originalDst(got)
					must(t, err)
					if od != netip.AddrPortFrom(fc.pod, 8080) {
						t.Fatalf("original destination %v, want %v", od, hp(fc.pod, 8080))
					}
				})
				t.Run("outbound lands on 15001", func(t *testing.T) {
					c, err := dial(topo.pod, "tcp", hp(fc.host, 9999), netip.Addr{}, 0)
					must(t, err)
					defer c.Close()
					got, err := netnstest.Accept(outbound, wait)
					must(t, err)
					got.Close()
				})
				t.Run("ztunnel-marked traffic is not redirected", func(t *testing.T) {
					c, err := dial(topo.pod, "tcp", hp(fc.host, 9999), netip.Addr{}, int(ProxyMark))
					must(t, err)
					defer c.Close()
					got, err := netnstest.Accept(hostSvc, wait)
					must(t, err)
					got.Close()
				})
				t.Run("DNS lands on 15053", func(t *testing.T) {
					sendDNS(t, topo, fc)
					buf := make([]byte, 64)
					must(t, dns.SetReadDeadline(time.Now().Add(wait)))
					n, _, err := dns.ReadFrom(buf)
					must(t, err)
					if string(buf[:n]) != "query" {
						t.Fatalf("15053 got %q", buf[:n])
					}
				})
				t.Run("probe address bypasses", func(t *testing.T) {
					c, err := dial(topo.host, "tcp", hp(fc.pod, 8080), fc.probe, 0)
					must(t, err)
					defer c.Close()
					got, err := netnstest.Accept(app, wait)
					must(t, err)
					got.Close()
				})
				t.Run("host probes are SNATed and bypass", func(t *testing.T) {
					// No source given: the node's SNAT rule rewrites it to
					// the probe address because the pod IP is in the set.
					c, err := dial(topo.host, "tcp", hp(fc.pod, 8080), netip.Addr{}, 0)
					must(t, err)
					defer c.Close()
					got, err := netnstest.Accept(app, wait)
					must(t, err)
					defer got.Close()
					src := got.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
					if src != fc.probe {
						t.Fatalf("probe arrived from %v, want SNAT to %v", src, fc.probe)
					}
				})
			})
		}
	}
}

func sendDNS(t *testing.T, topo *topology, fc famCase) {
	t.Helper()
	must(t, netnstest.Run(topo.pod, func() error {
		c, err := net.Dial("udp", hp(fc.host, 53))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("query"))
		return err
	}))
}

func TestDNSCaptureOff(t *testing.T) {
	privtest.RequireRoot(t)
	for _, b := range backends {
		for _, fc := range famCases {
			t.Run(string(b)+"/"+fc.name, func(t *testing.T) {
				topo := newTopology(t)
				r := topo.newRedirector(t, b)
				must(t, apply(r, topo.workload(fc.ips, enroll.Settings{DNSCapture: false})))
				hostDNS := listenUDP(t, topo.host, hp(fc.host, 53))
				podDNS := listenUDP(t, topo.pod, ":15053")
				sendDNS(t, topo, fc)
				buf := make([]byte, 64)
				must(t, hostDNS.SetReadDeadline(time.Now().Add(wait)))
				if _, _, err := hostDNS.ReadFrom(buf); err != nil {
					t.Fatalf("query did not reach the real DNS server: %v", err)
				}
				must(t, podDNS.SetReadDeadline(time.Now()))
				if n, _, err := podDNS.ReadFrom(buf); err == nil {
					t.Fatalf("ztunnel's DNS port got %q with capture off", buf[:n])
				}
			})
		}
	}
}

func TestBypassInbound(t *testing.T) {
	privtest.RequireRoot(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			topo := newTopology(t)
			r := topo.newRedirector(t, b)
			must(t, apply(r, topo.workload([]netip.Addr{podV4}, enroll.Settings{BypassInbound: true})))
			app := listen(t, topo.pod, "tcp", ":8080")
			listen(t, topo.pod, "tcp", ":15006")
			c, err := dial(topo.peer, "tcp", hp(podV4, 8080), netip.Addr{}, 0)
			must(t, err)
			defer c.Close()
			got, err := netnstest.Accept(app, wait)
			must(t, err)
			got.Close()
			// Outbound is still captured.
			out := listen(t, topo.pod, "tcp", ":15001")
			c2, err := dial(topo.pod, "tcp", hp(hostV4, 9999), netip.Addr{}, 0)
			must(t, err)
			defer c2.Close()
			got, err = netnstest.Accept(out, wait)
			must(t, err)
			got.Close()
		})
	}
}
