package netns_test

import (
	"errors"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

func TestHoldsAddrs(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	h, err := netns.Open(netnstest.NewWithAddrs(t, v4, v6))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, want := range [][]netip.Addr{nil, {v4}, {v6}, {v4, v6}, {netip.AddrFrom16(v4.As16())}} {
		if err := h.HoldsAddrs(want); err != nil {
			t.Errorf("HoldsAddrs(%v) on a namespace holding them: %v", want, err)
		}
	}
	other := netip.MustParseAddr("192.0.2.99")
	err = h.HoldsAddrs([]netip.Addr{v4, other})
	if !errors.Is(err, netns.ErrAddrsMissing) || !strings.Contains(err.Error(), ": 192.0.2.99 (it holds: 192.0.2.10, 2001:db8::10)") {
		t.Fatalf("HoldsAddrs with an address the namespace lacks = %v; want ErrAddrsMissing naming 192.0.2.99 only, then what it holds", err)
	}

	empty, err := netns.Open(netnstest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if err := empty.HoldsAddrs([]netip.Addr{v4}); !errors.Is(err, netns.ErrAddrsMissing) {
		t.Fatalf("HoldsAddrs on a namespace without addresses = %v, want ErrAddrsMissing", err)
	}
	_ = empty.Close()
	if err := empty.HoldsAddrs([]netip.Addr{v4}); !errors.Is(err, netns.ErrClosed) {
		t.Fatalf("HoldsAddrs on a closed handle = %v, want ErrClosed", err)
	}
}

// TestPodAddrs: a pod's IPs are the settled global addresses on its eth0,
// IPv4 first; another interface's, link-local and deprecated ones are not.
func TestPodAddrs(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	path := netnstest.NewWithAddrs(t, v6, v4)
	for _, cmd := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "net1", "type", "veth", "peer", "name", "net1-peer"},
		{"ip", "addr", "add", "198.51.100.7/32", "dev", "net1"},
		{"ip", "addr", "add", "192.0.2.11/32", "dev", "eth0", "preferred_lft", "0"},
	} {
		if out, err := exec.Command("nsenter", append([]string{"--net=" + path}, cmd...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	h, err := netns.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got, err := h.PodAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []netip.Addr{v4, v6}) {
		t.Fatalf("PodAddrs = %v, want [%v %v]", got, v4, v6)
	}

	noEth0, err := netns.Open(netnstest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer noEth0.Close()
	if got, err := noEth0.PodAddrs(); err == nil || !strings.Contains(err.Error(), "interface eth0") {
		t.Fatalf("PodAddrs of a namespace without eth0 = %v, %v; want an error naming eth0", got, err)
	}
	_ = noEth0.Close()
	if _, err := noEth0.PodAddrs(); !errors.Is(err, netns.ErrClosed) {
		t.Fatalf("PodAddrs on a closed handle = %v, want ErrClosed", err)
	}
}

// BenchmarkHoldsAddrs: the check every enrollment makes before it
// programs a pod.
func BenchmarkHoldsAddrs(b *testing.B) {
	ip := netip.MustParseAddr("192.0.2.10")
	h, err := netns.Open(netnstest.NewWithAddrs(b, ip))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	for b.Loop() {
		if err := h.HoldsAddrs([]netip.Addr{ip}); err != nil {
			b.Fatal(err)
		}
	}
}
