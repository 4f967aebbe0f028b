package netnstest

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns"
)

// NewWithAddrs creates a namespace like New holding a pod's addresses, as
// the CNI plugins leave it: lo up (the loopback plugin), and an interface
// eth0 (a veth whose peer stays in the namespace, down), up, with ips.
// meshlet refuses to enroll a pod whose namespace does not hold its IPs.
func NewWithAddrs(t testing.TB, ips ...netip.Addr) string {
	t.Helper()
	path := New(t)
	h, err := netns.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := Run(h, func() error { return addAddrs(ips) }); err != nil {
		t.Fatalf("netns %s: %v", path, err)
	}
	return path
}

// addAddrs runs in the namespace, on RunIn's thread.
func addAddrs(ips []netip.Addr) error {
	nh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := nh.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}
	if err := nh.LinkAdd(link); err != nil {
		return fmt.Errorf("add eth0: %w", err)
	}
	if err := nh.LinkSetUp(link); err != nil {
		return fmt.Errorf("eth0 up: %w", err)
	}
	for _, ip := range ips {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())},
			Flags: unix.IFA_F_NODAD}
		if err := nh.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("add %s to eth0: %w", ip, err)
		}
	}
	return nil
}
