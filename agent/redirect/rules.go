package redirect

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshlet/meshlet/agent/enroll"
)

// ztunnel's in-pod ports and marks (Istio ≥ 1.24). These are a contract
// with a stock ztunnel: do not change them.
const (
	PortOutbound = 15001
	PortInbound  = 15006
	PortHBONE    = 15008
	PortDNS      = 15053

	// ProxyMark marks packets ztunnel sends itself (SO_MARK).
	ProxyMark uint32 = 0x539
	// ConnMark marks connections ztunnel accepted, for the return path.
	ConnMark uint32 = 0x111
	// MarkMask is the part of the mark Istio owns.
	MarkMask uint32 = 0xfff

	// RouteTable and RulePriority are the policy routing Istio sets up.
	RouteTable   = 100
	RulePriority = 32764

	// DNSConntrackZone separates ztunnel's DNS proxy flows from the pod's.
	DNSConntrackZone = 1
)

// Host probe source addresses: kubelet probes are SNAT'ed to these on the
// node, and the in-pod rules let them bypass ztunnel.
var (
	ProbeAddrV4 = netip.MustParseAddr("169.254.7.127")
	ProbeAddrV6 = netip.MustParseAddr("fd16:9254:7127:1337:ffff:ffff:ffff:ffff")
)

// Family is an IP family.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string { return fmt.Sprintf("IPv%d", int(f)) }

func (f Family) probeAddr() netip.Addr {
	if f == IPv4 {
		return ProbeAddrV4
	}
	return ProbeAddrV6
}

func (f Family) loopback() netip.Addr {
	if f == IPv4 {
		return netip.MustParseAddr("127.0.0.1")
	}
	return netip.IPv6Loopback()
}

// ErrNoAddresses is returned for a pod without IP addresses: nothing can be
// redirected (and the node-side probe SNAT has nothing to match).
var ErrNoAddresses = errors.New("pod has no IP addresses")

// Plan is what Apply programs for one pod, derived from the pod's
// addresses and options.
type Plan struct {
	Families       []Family
	DNSCapture     bool
	InboundCapture bool
}

// PlanFor derives the plan: IPv4 if the pod has an IPv4 address, IPv6 if it
// has an IPv6 address and IPv6 is enabled.
func PlanFor(w *enroll.Workload) (Plan, error) {
	var has4, has6 bool
	for _, ip := range w.IPs {
		if ip.Unmap().Is4() {
			has4 = true
		} else {
			has6 = true
		}
	}
	p := Plan{DNSCapture: w.Options.DNSCapture, InboundCapture: !w.Options.BypassInbound}
	if has4 {
		p.Families = append(p.Families, IPv4)
	}
	if has6 && w.Options.IPv6 {
		p.Families = append(p.Families, IPv6)
	}
	switch {
	case len(w.IPs) == 0:
		return p, ErrNoAddresses
	case len(p.Families) == 0:
		return p, fmt.Errorf("pod has only IPv6 addresses %v and IPv6 redirection is disabled (--ipv6=false)", w.IPs)
	}
	return p, nil
}
