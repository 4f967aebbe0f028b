package redirect

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// TableName is the nftables table meshlet owns, in the pod's netns (family
// inet) and on the node (family inet, for probe SNAT). Nothing else in a
// netns is ever touched.
const TableName = "meshlet"

type chainSpec struct {
	name     string
	typ      nftables.ChainType
	hook     *nftables.ChainHook
	priority *nftables.ChainPriority
}

// The base chains mirror Istio's iptables tables: raw, mangle and nat on
// PREROUTING and OUTPUT. mangle OUTPUT is a route chain so a changed mark
// re-routes the packet, as iptables' mangle OUTPUT does.
var (
	chainPreRaw    = chainSpec{"prerouting-raw", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRaw}
	chainOutRaw    = chainSpec{"output-raw", nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityRaw}
	chainPreMangle = chainSpec{"prerouting-mangle", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityMangle}
	chainOutMangle = chainSpec{"output-mangle", nftables.ChainTypeRoute, nftables.ChainHookOutput, nftables.ChainPriorityMangle}
	chainPreNAT    = chainSpec{"prerouting-nat", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest}
	chainOutNAT    = chainSpec{"output-nat", nftables.ChainTypeNAT, nftables.ChainHookOutput, nftables.ChainPriorityNATDest}
)

// chainOrder fixes the order chains are created (and listed).
var chainOrder = []chainSpec{chainPreRaw, chainOutRaw, chainPreMangle, chainOutMangle, chainPreNAT, chainOutNAT}

// podRules returns, per chain, the rules for plan p, in the order Istio's
// iptables rules have them. Every rule is guarded by the IP family, so a
// single-stack pod gets nothing for the other family, as with Istio.
func podRules(p Plan) map[chainSpec][][]expr.Any {
	out := map[chainSpec][][]expr.Any{}
	add := func(c chainSpec, r []expr.Any) { out[c] = append(out[c], r) }
	for _, f := range p.Families {
		lo, probe := f.loopback(), f.probeAddr()
		if p.DNSCapture {
			// ztunnel's DNS proxy flows get their own conntrack zone.
			add(chainOutRaw, rule().family(f).udp().mark(ProxyMark).dport(53).ctZone(DNSConntrackZone))
			add(chainPreRaw, rule().family(f).udp().markNot(ProxyMark).sport(53).ctZone(DNSConntrackZone))
		}
		if p.InboundCapture {
			// Connections ztunnel accepts (its packets carry 0x539) are
			// marked so their replies route back through it.
			add(chainPreMangle, rule().family(f).mark(ProxyMark).setConnMark(ConnMark))
		}
		add(chainOutMangle, rule().family(f).ctMarkIs(ConnMark).restoreMark())
		if p.InboundCapture {
			add(chainPreNAT, rule().family(f).saddr(probe).tcp().accept())
			add(chainPreNAT, rule().family(f).daddrNot(lo).tcp().dportNot(PortHBONE).markNot(ProxyMark).redirect(PortInbound))
		}
		add(chainOutNAT, rule().family(f).daddr(probe).tcp().accept())
		if p.DNSCapture {
			add(chainOutNAT, rule().family(f).oifname(expr.CmpOpNeq, "lo").udp().markNot(ProxyMark).dport(53).redirect(PortDNS))
			add(chainOutNAT, rule().family(f).daddrNot(lo).tcp().dport(53).markNot(ProxyMark).redirect(PortDNS))
		}
		add(chainOutNAT, rule().family(f).tcp().mark(ConnMark).accept())
		add(chainOutNAT, rule().family(f).daddrNot(lo).oifname(expr.CmpOpEq, "lo").accept())
		add(chainOutNAT, rule().family(f).daddrNot(lo).tcp().markNot(ProxyMark).redirect(PortOutbound))
	}
	return out
}

// nftBatchHook, when set by a test, runs just before the batch is sent;
// it can add a broken message to prove the batch is all-or-nothing.
var nftBatchHook func(c *nftables.Conn, t *nftables.Table)

// applyNftables replaces meshlet's table in the netns with the rules for p
// in one netlink transaction: on any error the netns keeps whatever it had
// before, never a mix.
func applyNftables(netnsFd int, p Plan) error {
	c, err := nftables.New(nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	// add + delete + add: replaces a stale or partial table atomically,
	// and works whether or not the table exists.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	rules := podRules(p)
	for _, spec := range chainOrder {
		rs := rules[spec]
		if len(rs) == 0 {
			continue
		}
		ch := c.AddChain(&nftables.Chain{Name: spec.name, Table: t, Type: spec.typ, Hooknum: spec.hook, Priority: spec.priority})
		for _, r := range rs {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
		}
	}
	if nftBatchHook != nil {
		nftBatchHook(c, t)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: apply table inet %s: %w", TableName, err)
	}
	return nil
}

// removeNftables deletes meshlet's table from the netns, if present.
func removeNftables(netnsFd int) error {
	c, err := nftables.New(nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete table inet %s: %w", TableName, err)
	}
	return nil
}
