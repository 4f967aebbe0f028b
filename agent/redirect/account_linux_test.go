package redirect

import (
	"net/netip"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
)

// TestAccountIsApplys: Account, which reads a table, gives what Apply
// returns (the account of PlanFor's plan) for every kind of pod under
// either IPv6 setting and both backends, and refuses what PlanFor
// refuses, in its words.
func TestAccountIsApplys(t *testing.T) {
	mapped := netip.AddrFrom16(podV4.As16())
	addrs := [][]netip.Addr{nil, {podV4}, {mapped}, {podV6}, {podV4, podV6}, {podV6, mapped}}
	for _, backend := range []Backend{BackendNftables, BackendIptables, ""} {
		for _, ipv6 := range []bool{true, false} {
			r := &Redirector{cfg: Config{Backend: backend}}
			r.ipv6.Store(ipv6)
			r.fillAccounts()
			for _, ips := range addrs {
				for _, s := range []enroll.Settings{{}, {DNSCapture: true}, {BypassInbound: true}, {DNSCapture: true, BypassInbound: true}} {
					got, err := r.Account(&enroll.Record{IPs: ips, Settings: s})
					p, perr := PlanFor(ips, s, ipv6)
					switch {
					case perr != nil:
						if err == nil || err.Error() != perr.Error() {
							t.Errorf("%q ipv6=%t %v %+v: Account = %q, %v; want PlanFor's refusal %v", backend, ipv6, ips, s, got, err, perr)
						}
					case err != nil || got != r.account(p):
						t.Errorf("%q ipv6=%t %v %+v: Account = %q, %v; want %q", backend, ipv6, ips, s, got, err, r.account(p))
					}
				}
			}
		}
	}
}
