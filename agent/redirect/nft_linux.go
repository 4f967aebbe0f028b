package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns"
)

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

// podRules returns, per chain, the rules for plan p. They do what Istio's
// iptables rules do; the accepts that only exist to skip later redirects
// are folded into those redirects as negated matches, because every rule
// costs kernel time (~30-40 µs here) inside the runtime's hook:
//
//	Istio (nat OUTPUT)                        here (output-nat)
//	-d probe -p tcp -j ACCEPT                 daddr != probe   in the TCP redirects
//	-p tcp -m mark --mark 0x111 -j ACCEPT     mark != 0x111    in the 15001 redirect
//	! -d lo-addr -o lo -j ACCEPT              oifname != "lo"  in the 15001 redirect
//	-s probe -p tcp -j ACCEPT (nat PRERT)     saddr != probe   in the 15006 redirect
//
// Rules that do not depend on the IP family are written once for a
// dual-stack pod. Address matches are guarded by the family, so a
// single-stack pod gets nothing for the other. The packet tests prove the
// behaviour is the same as the iptables backend's, which is Istio's text.
func podRules(p Plan) map[chainSpec][][]expr.Any {
	out := map[chainSpec][][]expr.Any{}
	add := func(c chainSpec, r []expr.Any) { out[c] = append(out[c], r) }
	// any matches every family the plan has.
	any := rule
	if len(p.Families) == 1 {
		any = func() match { return rule().family(p.Families[0]) }
	}
	perFamily := func(fn func(f Family, lo, probe netip.Addr)) {
		for _, f := range p.Families {
			fn(f, f.loopback(), f.probeAddr())
		}
	}

	if p.DNSCapture {
		// ztunnel's DNS proxy flows get their own conntrack zone.
		add(chainOutRaw, any().udp().mark(ProxyMark).dport(53).ctZone(DNSConntrackZone))
		add(chainPreRaw, any().udp().markNot(ProxyMark).sport(53).ctZone(DNSConntrackZone))
	}
	if p.InboundCapture {
		// Connections ztunnel accepts (its packets carry 0x539) are marked
		// so that replies route back through it.
		add(chainPreMangle, any().mark(ProxyMark).setConnMark(ConnMark))
		perFamily(func(f Family, lo, probe netip.Addr) {
			add(chainPreNAT, rule().family(f).saddrNot(probe).daddrNot(lo).tcp().dportNot(PortHBONE).markNot(ProxyMark).redirect(PortInbound))
		})
	}
	add(chainOutMangle, any().ctMarkIs(ConnMark).restoreMark())

	if p.DNSCapture {
		add(chainOutNAT, any().oifname(expr.CmpOpNeq, "lo").udp().markNot(ProxyMark).dport(53).redirect(PortDNS))
		perFamily(func(f Family, lo, probe netip.Addr) {
			add(chainOutNAT, rule().family(f).daddrNotEither(lo, probe).tcp().dport(53).markNot(ProxyMark).redirect(PortDNS))
		})
	}
	perFamily(func(f Family, lo, probe netip.Addr) {
		add(chainOutNAT, rule().family(f).daddrNotEither(lo, probe).oifname(expr.CmpOpNeq, "lo").tcp().
			markNotEither(ProxyMark, ConnMark).redirect(PortOutbound))
	})
	return out
}

// nftBatchHook, when set by a test, changes the batch before it is sent;
// it can add a broken message to prove the batch is all-or-nothing.
var nftBatchHook func(b *nftBatch)

// applyNftables installs meshlet's table in the netns with the rules for p
// in one netlink transaction: on any error the netns keeps whatever it had
// before, never a mix.
//
// The first attempt creates the table exclusively: a new pod has none, and
// a transaction that deletes nothing commits without waiting for an RCU
// grace period (deleting costs several milliseconds inside the runtime's
// hook). Only if the table exists (re-apply, a crashed agent's leftovers)
// is it replaced with add + delete + add.
func applyNftables(netnsFd int, p Plan) error {
	sock := -1
	err := netns.RunIn(netnsFd, func() (err error) { sock, err = nftSocket(); return err })
	if sock >= 0 {
		defer unix.Close(sock) // also when RunIn failed after making it
	}
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return applyNftablesOn(sock, p)
}

// applyNftablesOn is applyNftables through sock, a NETLINK_NETFILTER
// socket opened in the pod's namespace.
func applyNftablesOn(sock int, p Plan) error {
	create, err := podBatch(p, false)
	if err == nil {
		err = create.send(sock)
	}
	if errors.Is(err, unix.EEXIST) {
		var replace *nftWire
		if replace, err = podBatch(p, true); err == nil {
			err = replace.send(sock)
		}
	}
	if err != nil {
		return fmt.Errorf("nftables: apply table inet %s: %w", TableName, err)
	}
	return nil
}

// podBatches caches each plan's batches (create, replace): they depend on
// the plan only, so a pod's apply sends bytes marshalled once.
var podBatches [16][2]struct {
	once sync.Once
	wire *nftWire
	err  error
}

// podBatch is the batch that writes plan p's table: created where none
// exists, or replacing the one there.
func podBatch(p Plan, replace bool) (*nftWire, error) {
	if nftBatchHook != nil {
		return buildPodBatch(p, replace)
	}
	has4, has6 := slices.Contains(p.Families, IPv4), slices.Contains(p.Families, IPv6)
	i := planIndex(has4, has6, p.DNSCapture, p.InboundCapture)
	c := &podBatches[i][boolIndex(replace)]
	// From the index's plan, not p: the same rules whatever order p
	// lists its families in.
	c.once.Do(func() { c.wire, c.err = buildPodBatch(indexPlan(i), replace) })
	return c.wire, c.err
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

func buildPodBatch(p Plan, replace bool) (*nftWire, error) {
	b := newNftBatch(byte(nftables.TableFamilyINet))
	if replace {
		// add + delete + add replaces a stale or partial table atomically.
		b.addTable(TableName, false)
		b.delTable(TableName)
		b.addTable(TableName, false)
	} else {
		b.addTable(TableName, true)
	}
	rules := podRules(p)
	for _, spec := range chainOrder {
		rs := rules[spec]
		if len(rs) == 0 {
			continue
		}
		b.addChain(TableName, spec)
		for i, r := range rs {
			b.addRule(TableName, spec.name, i+1, r)
		}
	}
	if nftBatchHook != nil {
		nftBatchHook(b)
	}
	return b.wire()
}

// removeNftables deletes meshlet's table from the netns, if present. The
// table is looked up first: deleting costs an RCU grace period (ms), which
// a pod that never had the table (start-up checks for leftovers) must not
// pay.
func removeNftables(netnsFd int) error {
	c, err := nftables.New(nftables.WithNetNSFd(netnsFd), nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	if _, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("nftables: look up table inet %s: %w", TableName, err)
	}
	c.DelTable(t)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftables: delete table inet %s: %w", TableName, err)
	}
	return nil
}

// hasNftTable reports whether meshlet's table exists in the netns.
func hasNftTable(netnsFd int) (bool, error) {
	c, err := nftables.New(nftables.WithNetNSFd(netnsFd), nftables.AsLasting())
	if err != nil {
		return false, err
	}
	defer c.CloseLasting()
	if _, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
