package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

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

// RulesVersion is the version of the in-pod rules this meshlet writes
// (either backend). It is part of every pod record's account of its rules,
// so a restarted meshlet keeps a pod's rules only when they were written by
// the same version. Bump it with any change to what the backends install
// (the golden files under testdata/ change with it).
const RulesVersion = 1

// ErrNoAddresses is returned for a pod without IP addresses: nothing can be
// redirected (and the node-side probe SNAT has nothing to match).
var ErrNoAddresses = errors.New("pod has no IP addresses")

// Plan is what Apply programs for one pod, derived from the pod's
// addresses and settings and the node's IPv6 setting.
type Plan struct {
	Families       []Family
	DNSCapture     bool
	InboundCapture bool
}

// String is the plan's stable, readable form ("ipv4+ipv6 dns-capture
// inbound-capture"); it is part of the account a pod's record keeps of its
// rules, so changing it makes a restarted agent rewrite every pod's rules
// once instead of keeping them.
func (p Plan) String() string {
	var b strings.Builder
	for i, f := range p.Families {
		if i > 0 {
			b.WriteByte('+')
		}
		fmt.Fprintf(&b, "ipv%d", int(f))
	}
	if p.DNSCapture {
		b.WriteString(" dns-capture")
	}
	if p.InboundCapture {
		b.WriteString(" inbound-capture")
	}
	return b.String()
}

// families reports whether ips hold an IPv4 address (v4-mapped ones
// included) and an IPv6 one.
func families(ips []netip.Addr) (has4, has6 bool) {
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			has4 = true
		} else {
			has6 = true
		}
	}
	return has4, has6
}

// PlanFor derives the plan: IPv4 if the pod has an IPv4 address, IPv6 if it
// has an IPv6 address and ipv6 (the node's setting) is on.
func PlanFor(ips []netip.Addr, s enroll.Settings, ipv6 bool) (Plan, error) {
	has4, has6 := families(ips)
	p := Plan{DNSCapture: s.DNSCapture, InboundCapture: !s.BypassInbound}
	if has4 {
		p.Families = append(p.Families, IPv4)
	}
	if has6 && ipv6 {
		p.Families = append(p.Families, IPv6)
	}
	switch {
	case len(ips) == 0:
		return p, ErrNoAddresses
	case len(p.Families) == 0:
		return p, fmt.Errorf("pod has only IPv6 addresses %v and IPv6 redirection is off (the ipv6 node setting, --ipv6)", ips)
	}
	return p, nil
}
