package shim

import (
	"fmt"
	"net"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// TestAddressesAreThePods: of a result's IPs, those on a host-side
// interface are not the pod's; those on the pod's interface, or on none
// named, are.
func TestAddressesAreThePods(t *testing.T) {
	idx := func(i int) *int { return &i }
	ip := func(s string, iface *int) *current.IPConfig {
		_, n, _ := net.ParseCIDR(s + "/24")
		n.IP = net.ParseIP(s)
		return &current.IPConfig{Interface: iface, Address: *n}
	}
	r := &current.Result{
		Interfaces: []*current.Interface{{Name: "cni0"}, {Name: "veth1234"}, {Name: "eth0", Sandbox: "/var/run/netns/p"}},
		IPs:        []*current.IPConfig{ip("10.1.2.3", idx(2)), ip("10.1.2.1", idx(0)), ip("10.1.2.4", nil), ip("10.1.2.5", idx(9))},
	}
	if got := fmt.Sprint(addresses(r)); got != "[10.1.2.3 10.1.2.4 10.1.2.5]" {
		t.Fatalf("addresses %s, want the pod interface's, the one on no interface and the one whose interface is out of range", got)
	}
}
