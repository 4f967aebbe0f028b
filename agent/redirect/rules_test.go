package redirect

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
)

func TestPlanFor(t *testing.T) {
	mapped := netip.AddrFrom16(podV4.As16()) // ::ffff:192.0.2.2, as some runtimes report IPv4
	for _, c := range []struct {
		name     string
		ips      []netip.Addr
		settings enroll.Settings
		ipv6     bool // the node's --ipv6
		families []Family
		dns      bool
		inbound  bool
		err      string // a substring of the error; "" for none
	}{
		{name: "ipv4", ips: []netip.Addr{podV4}, settings: enroll.Settings{DNSCapture: true}, ipv6: true,
			families: []Family{IPv4}, dns: true, inbound: true},
		{name: "ipv6", ips: []netip.Addr{podV6}, settings: enroll.Settings{}, ipv6: true,
			families: []Family{IPv6}, inbound: true},
		{name: "dual", ips: []netip.Addr{podV6, podV4}, settings: enroll.Settings{}, ipv6: true,
			families: []Family{IPv4, IPv6}, inbound: true},
		{name: "dual with IPv6 off redirects IPv4 only", ips: []netip.Addr{podV4, podV6}, settings: enroll.Settings{}, ipv6: false,
			families: []Family{IPv4}, inbound: true},
		{name: "IPv4-mapped address is IPv4", ips: []netip.Addr{mapped}, settings: enroll.Settings{}, ipv6: false,
			families: []Family{IPv4}, inbound: true},
		{name: "bypass inbound", ips: []netip.Addr{podV4}, settings: enroll.Settings{BypassInbound: true, DNSCapture: true}, ipv6: false,
			families: []Family{IPv4}, dns: true, inbound: false},
		{name: "IPv6 only with IPv6 off", ips: []netip.Addr{podV6}, settings: enroll.Settings{DNSCapture: true}, ipv6: false,
			err: "ipv6 node setting"},
		{name: "no addresses", ips: nil, settings: enroll.Settings{}, ipv6: true, err: ErrNoAddresses.Error()},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanFor(c.ips, c.settings, c.ipv6)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("PlanFor = %+v, %v; want an error containing %q", p, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Families, c.families) || p.DNSCapture != c.dns || p.InboundCapture != c.inbound {
				t.Fatalf("PlanFor = %+v, want families %v, DNS capture %t, inbound capture %t", p, c.families, c.dns, c.inbound)
			}
		})
	}
	// Callers tell a pod without addresses from a misconfiguration.
	if _, err := PlanFor(nil, enroll.Settings{}, false); !errors.Is(err, ErrNoAddresses) {
		t.Fatalf("PlanFor without addresses = %v, want ErrNoAddresses", err)
	}
}

// TestPlanString: the plan's text is part of every checkpointed record's
// account of its rules; changing it makes a restarted meshlet rewrite every
// pod's rules once, so it changes only on purpose.
func TestPlanString(t *testing.T) {
	for p, want := range map[*Plan]string{
		{Families: []Family{IPv4, IPv6}, DNSCapture: true, InboundCapture: true}: "ipv4+ipv6 dns-capture inbound-capture",
		{Families: []Family{IPv4}, InboundCapture: true}:                         "ipv4 inbound-capture",
		{Families: []Family{IPv6}, DNSCapture: true}:                             "ipv6 dns-capture",
	} {
		if got := p.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", *p, got, want)
		}
	}
}
