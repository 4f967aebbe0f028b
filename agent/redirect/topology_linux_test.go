package redirect

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// A test topology: a "host" netns and a "pod" netns (podV4, podV6) joined
// by a veth pair, on documentation addresses. Nothing touches the machine's
// own network.
var (
	hostV4 = netip.MustParseAddr("192.0.2.1")
	hostV6 = netip.MustParseAddr("2001:db8::1")
	// A peer: another workload whose traffic the host forwards (no local
	// socket on the host, so no probe SNAT).
	hostPeerV4 = netip.MustParseAddr("198.51.100.1")
	peerV4     = netip.MustParseAddr("198.51.100.2")
	hostPeerV6 = netip.MustParseAddr("2001:db8:1::1")
	peerV6     = netip.MustParseAddr("2001:db8:1::2")
)

type topology struct {
	host, pod, peer *netns.Handle
	podIPs          []netip.Addr
}

func newTopology(t testing.TB) *topology {
	t.Helper()
	topo := &topology{host: netnstest.Open(t), pod: netnstest.Open(t), peer: netnstest.Open(t),
		podIPs: []netip.Addr{podV4, podV6}}
	hh := handleIn(t, topo.host)
	ph := handleIn(t, topo.pod)
	eh := handleIn(t, topo.peer)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth-host"}, PeerName: "eth0",
		PeerNamespace: netlink.NsFd(netnstest.Fd(t, topo.pod))}
	must(t, hh.LinkAdd(veth))
	must(t, hh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth-peer"}, PeerName: "eth0",
		PeerNamespace: netlink.NsFd(netnstest.Fd(t, topo.peer))}))
	for _, h := range []*netlink.Handle{hh, ph, eh} {
		lo, err := h.LinkByName("lo")
		must(t, err)
		must(t, h.LinkSetUp(lo))
	}
	hostLink, err := hh.LinkByName("veth-host")
	must(t, err)
	podLink, err := ph.LinkByName("eth0")
	must(t, err)
	addAddr := func(h *netlink.Handle, l netlink.Link, a netip.Addr, bits int) {
		must(t, h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())},
			Flags: unix.IFA_F_NODAD}))
	}
	addAddr(hh, hostLink, hostV4, 24)
	addAddr(hh, hostLink, hostV6, 64)
	// The host side can source kubelet-like probes from the probe addresses.
	addAddr(hh, hostLink, ProbeAddrV4, 32)
	addAddr(hh, hostLink, ProbeAddrV6, 128)
	addAddr(ph, podLink, podV4, 24)
	addAddr(ph, podLink, podV6, 64)
	must(t, hh.LinkSetUp(hostLink))
	must(t, ph.LinkSetUp(podLink))
	must(t, ph.RouteAdd(&netlink.Route{Gw: hostV4.AsSlice()}))
	must(t, ph.RouteAdd(&netlink.Route{Gw: hostV6.AsSlice(), LinkIndex: podLink.Attrs().Index}))

	hostPeerLink, err := hh.LinkByName("veth-peer")
	must(t, err)
	peerLink, err := eh.LinkByName("eth0")
	must(t, err)
	addAddr(hh, hostPeerLink, hostPeerV4, 24)
	addAddr(hh, hostPeerLink, hostPeerV6, 64)
	addAddr(eh, peerLink, peerV4, 24)
	addAddr(eh, peerLink, peerV6, 64)
	must(t, hh.LinkSetUp(hostPeerLink))
	must(t, eh.LinkSetUp(peerLink))
	must(t, eh.RouteAdd(&netlink.Route{Gw: hostPeerV4.AsSlice()}))
	must(t, eh.RouteAdd(&netlink.Route{Gw: hostPeerV6.AsSlice(), LinkIndex: peerLink.Attrs().Index}))
	// Forwarding in the host netns only (sysctls are per netns).
	inNetns(t, topo.host, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	return topo
}

func handleIn(t testing.TB, h *netns.Handle) *netlink.Handle {
	nh, err := netlink.NewHandleAt(vnetns.NsHandle(netnstest.Fd(t, h)))
	must(t, err)
	t.Cleanup(nh.Close)
	return nh
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// workload returns a pod workload on the topology's pod netns.
func (topo *topology) workload(ips []netip.Addr, settings enroll.Settings) *enroll.Workload {
	return podWorkload(topo.pod, ips, settings)
}

// podWorkload is a workload for the pod netns h.
func podWorkload(h *netns.Handle, ips []netip.Addr, settings enroll.Settings) *enroll.Workload {
	return &enroll.Workload{Record: enroll.Record{UID: "pod-uid", Name: "pod", Namespace: "ns", IPs: ips,
		NetnsInode: h.Inode(), Settings: settings}, Netns: h}
}

// apply applies w as a first enrollment (no checkpointed record).
func apply(r *Redirector, w *enroll.Workload) error {
	_, err := r.Apply(context.Background(), w, nil)
	return err
}

// withoutIPv6 configures a redirector with --ipv6=false.
func withoutIPv6(c *Config) { c.IPv6 = false }

// newRedirector builds a Redirector whose node side lives in the topology's
// host netns; its node-side objects are removed at cleanup.
func (topo *topology) newRedirector(t testing.TB, b Backend, opts ...func(*Config)) *Redirector {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Backend, cfg.HostNetnsFd = b, netnstest.Fd(t, topo.host)
	for _, o := range opts {
		o(&cfg)
	}
	switch b {
	case BackendIptables:
		cfg.IptablesVariant = VariantNft
	case backendIptablesLegacy:
		cfg.Backend, cfg.IptablesVariant = BackendIptables, VariantLegacy
	}
	r, err := New(cfg)
	must(t, err)
	t.Cleanup(func() {
		if err := r.host.Uninstall(); err != nil {
			t.Errorf("Uninstall: %v", err)
		}
	})
	return r
}

// inNetns runs a command in the namespace and returns its output.
func inNetns(t testing.TB, h *netns.Handle, name string, args ...string) string {
	t.Helper()
	var out []byte
	err := netnstest.Run(h, func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// listen opens a listener inside the namespace (the socket keeps the
// namespace it was created in).
func listen(t testing.TB, h *netns.Handle, network, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	must(t, netnstest.Run(h, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	}))
	t.Cleanup(func() { l.Close() })
	return l
}

func listenUDP(t testing.TB, h *netns.Handle, addr string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	must(t, netnstest.Run(h, func() error {
		var err error
		c, err = net.ListenPacket("udp", addr)
		return err
	}))
	t.Cleanup(func() { c.Close() })
	return c
}

// dial connects from inside the namespace, optionally from a source address
// and with SO_MARK set.
func dial(h *netns.Handle, network, addr string, src netip.Addr, mark int) (net.Conn, error) {
	var c net.Conn
	err := netnstest.Run(h, func() error {
		d := net.Dialer{Timeout: wait}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		if mark != 0 {
			d.Control = func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark) })
				if err != nil {
					return err
				}
				return serr
			}
		}
		var err error
		c, err = d.DialContext(context.Background(), network, addr)
		return err
	})
	return c, err
}

// originalDst reads SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6)
// from a redirected connection.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	is6 := c.LocalAddr().(*net.TCPAddr).IP.To4() == nil
	err = rc.Control(func(fd uintptr) {
		if !is6 {
			mreq, e := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if e != nil {
				serr = e
				return
			}
			// struct sockaddr_in: family(2) port(2, BE) addr(4)
			port := uint16(mreq.Multiaddr[2])<<8 | uint16(mreq.Multiaddr[3])
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(mreq.Multiaddr[4:8])), port)
			return
		}
		mtu, e := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSoOriginalDst)
		if e != nil {
			serr = e
			return
		}
		port := mtu.Addr.Port>>8 | mtu.Addr.Port<<8
		ap = netip.AddrPortFrom(netip.AddrFrom16(mtu.Addr.Addr), port)
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return ap, serr
}

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h.
const ip6tSoOriginalDst = 80

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
