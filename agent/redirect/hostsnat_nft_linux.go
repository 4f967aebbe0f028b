package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Node-side probe SNAT, nftables flavour: table inet meshlet (or
// meshlet-<instance>: nodeNames) on the node
// holds one set of enrolled pod addresses per family and a postrouting rule
// that SNATs locally originated TCP (kubelet's probes) to those addresses
// to the probe address the in-pod rules let through. A pod's enrollment
// adds or deletes its set elements only: the rule and the other pods'
// elements are never rewritten.

const (
	hostSetV4    = "probe-pods-v4"
	hostSetV6    = "probe-pods-v6"
	hostSNATName = "postrouting-probe-snat"
)

// hostSNAT maintains the node's probe SNAT state.
type hostSNAT interface {
	// Add puts the pod's addresses in the SNAT sets.
	Add(ips []netip.Addr) error
	// Delete takes them out; absent ones are ignored.
	Delete(ips []netip.Addr) error
	// Uninstall removes every node-side object meshlet created.
	Uninstall() error
	// Retain deletes every address not in keep: pods that were released
	// while no agent ran (their sandboxes removed) leave stale addresses.
	Retain(keep []netip.Addr) error
	// Close releases resources, leaving the node's state in place.
	Close() error
}

type nftHostSNAT struct {
	mu    sync.Mutex
	netns int // -1: the agent's own netns
	table *nftables.Table
	set4  *nftables.Set
	set6  *nftables.Set
	conn  *nftables.Conn
}

var _ hostSNAT = (*nftHostSNAT)(nil)

func hostConn(netnsFd int) (*nftables.Conn, error) {
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if netnsFd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	return nftables.New(opts...)
}

// newNftHostSNAT ensures the node table, sets and rule exist, keeping the
// set elements already there (a restarted agent keeps probes working for
// pods enrolled before). netnsFd -1 means the agent's own netns.
func newNftHostSNAT(netnsFd int, table string) (*nftHostSNAT, error) {
	c, err := hostConn(netnsFd)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	h := &nftHostSNAT{netns: netnsFd, conn: c,
		table: &nftables.Table{Name: table, Family: nftables.TableFamilyINet}}
	h.set4 = &nftables.Set{Table: h.table, Name: hostSetV4, KeyType: nftables.TypeIPAddr}
	h.set6 = &nftables.Set{Table: h.table, Name: hostSetV6, KeyType: nftables.TypeIP6Addr}
	c.AddTable(h.table)
	if err := c.AddSet(h.set4, nil); err != nil {
		return nil, err
	}
	if err := c.AddSet(h.set6, nil); err != nil {
		return nil, err
	}
	ch := c.AddChain(&nftables.Chain{Name: hostSNATName, Table: h.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.FlushChain(ch)
	for _, f := range []Family{IPv4, IPv6} {
		set, nfproto := h.set4, uint32(unix.NFPROTO_IPV4)
		if f == IPv6 {
			set, nfproto = h.set6, unix.NFPROTO_IPV6
		}
		off, n := uint32(16), uint32(4)
		if f == IPv6 {
			off, n = 24, 16
		}
		exprs := rule().family(f).tcp()
		exprs = append(exprs,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			// Like iptables' "-m owner --socket-exists": only packets
			// from a local socket (kubelet), never forwarded traffic.
			&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Immediate{Register: 1, Data: f.probeAddr().AsSlice()},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: nfproto, RegAddrMin: 1})
		c.AddRule(&nftables.Rule{Table: h.table, Chain: ch, Exprs: exprs})
	}
	if err := c.Flush(); err != nil {
		_ = c.CloseLasting()
		return nil, fmt.Errorf("nftables: set up node probe SNAT (table inet %s): %w", table, err)
	}
	return h, nil
}

func (h *nftHostSNAT) elements(ips []netip.Addr) (v4, v6 []nftables.SetElement) {
	for _, ip := range ips {
		ip = ip.Unmap()
		if ip.Is4() {
			v4 = append(v4, nftables.SetElement{Key: ip.AsSlice()})
		} else {
			v6 = append(v6, nftables.SetElement{Key: ip.AsSlice()})
		}
	}
	return v4, v6
}

func (h *nftHostSNAT) Add(ips []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	v4, v6 := h.elements(ips)
	if err := h.batch(h.conn.SetAddElements, v4, v6); err != nil {
		return fmt.Errorf("nftables: add %v to node probe SNAT sets: %w", ips, err)
	}
	return nil
}

func (h *nftHostSNAT) Delete(ips []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	v4, v6 := h.elements(ips)
	err := h.batch(h.conn.SetDeleteElements, v4, v6)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return err
	}
	// One element was already gone, which fails the whole batch: delete
	// one by one, ignoring the absent ones.
	var errs []error
	for _, e := range v4 {
		if err := h.batch(h.conn.SetDeleteElements, []nftables.SetElement{e}, nil); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	for _, e := range v6 {
		if err := h.batch(h.conn.SetDeleteElements, nil, []nftables.SetElement{e}); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nftables: delete %v from node probe SNAT sets: %w", ips, err)
	}
	return nil
}

func (h *nftHostSNAT) batch(op func(*nftables.Set, []nftables.SetElement) error, v4, v6 []nftables.SetElement) error {
	if len(v4) > 0 {
		if err := op(h.set4, v4); err != nil {
			return err
		}
	}
	if len(v6) > 0 {
		if err := op(h.set6, v6); err != nil {
			return err
		}
	}
	return h.conn.Flush()
}

func (h *nftHostSNAT) Uninstall() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conn.AddTable(h.table)
	h.conn.DelTable(h.table)
	err := h.conn.Flush()
	_ = h.conn.CloseLasting()
	if err != nil {
		return fmt.Errorf("nftables: delete node table inet %s: %w", h.table.Name, err)
	}
	return nil
}

func (h *nftHostSNAT) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn.CloseLasting()
}

func (h *nftHostSNAT) Retain(keep []netip.Addr) error {
	h.mu.Lock()
	var stale []netip.Addr
	for _, set := range []*nftables.Set{h.set4, h.set6} {
		elems, err := h.conn.GetSetElements(set)
		if err != nil {
			h.mu.Unlock()
			return fmt.Errorf("nftables: list %s: %w", set.Name, err)
		}
		for _, e := range elems {
			if ip, ok := netip.AddrFromSlice(e.Key); ok && !slices.Contains(keep, ip.Unmap()) {
				stale = append(stale, ip.Unmap())
			}
		}
	}
	h.mu.Unlock()
	if len(stale) == 0 {
		return nil
	}
	return h.Delete(stale)
}
