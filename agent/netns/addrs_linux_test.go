package netns_test

import (
	"errors"
	"net/netip"
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
	if !errors.Is(err, netns.ErrAddrsMissing) || !strings.Contains(err.Error(), "192.0.2.99") || strings.Contains(err.Error(), "192.0.2.10,") {
		t.Fatalf("HoldsAddrs with an address the namespace lacks = %v; want ErrAddrsMissing naming 192.0.2.99 only", err)
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
