package redirect

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Node-side probe SNAT, iptables flavour, as Istio does it: an ipset of
// enrolled pod addresses per family and a nat POSTROUTING rule matching
// locally originated TCP to them (names: nodeNames).

type iptablesHostSNAT struct {
	mu    sync.Mutex
	ipt   *iptablesBackend
	netns int
	names nodeNames
}

var _ hostSNAT = (*iptablesHostSNAT)(nil)

func newIptablesHostSNAT(ipt *iptablesBackend, netnsFd int, names nodeNames) (*iptablesHostSNAT, error) {
	h := &iptablesHostSNAT{ipt: ipt, netns: netnsFd, names: names}
	chainHostSNAT := names.chain
	for _, f := range []Family{IPv4, IPv6} {
		set, fam := names.ipset4, "inet"
		if f == IPv6 {
			set, fam = names.ipset6, "inet6"
		}
		if _, err := runIn(context.Background(), netnsFd, "ipset", nil, "create", set, "hash:ip", "family", fam, "-exist"); err != nil {
			return nil, fmt.Errorf("node probe SNAT: %w", err)
		}
		cur, err := ipt.save(context.Background(), netnsFd, f)
		if err != nil {
			return nil, fmt.Errorf("node probe SNAT: %w", err)
		}
		jump := "-A POSTROUTING -j " + chainHostSNAT
		var b strings.Builder
		fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n", chainHostSNAT)
		if !cur.has("nat", jump) {
			fmt.Fprintf(&b, "-I POSTROUTING 1 -j %s\n", chainHostSNAT)
		}
		fmt.Fprintf(&b, "-A %s -m owner --socket-exists -p tcp -m set --match-set %s dst -j SNAT --to-source %s\nCOMMIT\n",
			chainHostSNAT, set, f.probeAddr())
		if err := ipt.restore(context.Background(), netnsFd, f, b.String()); err != nil {
			return nil, fmt.Errorf("node probe SNAT: %w", err)
		}
	}
	return h, nil
}

func (h *iptablesHostSNAT) each(op string, ips []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, ip := range ips {
		ip = ip.Unmap()
		set := h.names.ipset4
		if ip.Is6() {
			set = h.names.ipset6
		}
		if _, err := runIn(context.Background(), h.netns, "ipset", nil, op, set, ip.String(), "-exist"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (h *iptablesHostSNAT) Add(ips []netip.Addr) error    { return h.each("add", ips) }
func (h *iptablesHostSNAT) Delete(ips []netip.Addr) error { return h.each("del", ips) }

func (h *iptablesHostSNAT) Uninstall() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	chainHostSNAT := h.names.chain
	for _, f := range []Family{IPv4, IPv6} {
		cur, err := h.ipt.save(context.Background(), h.netns, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var b strings.Builder
		if cur.has("nat", "-A POSTROUTING -j "+chainHostSNAT) {
			fmt.Fprintf(&b, "-D POSTROUTING -j %s\n", chainHostSNAT)
		}
		if cur.hasChain("nat", chainHostSNAT) {
			fmt.Fprintf(&b, "-F %s\n-X %s\n", chainHostSNAT, chainHostSNAT)
		}
		if b.Len() > 0 {
			if err := h.ipt.restore(context.Background(), h.netns, f, "*nat\n"+b.String()+"COMMIT\n"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The sets go after the rules that reference them.
	for _, set := range []string{h.names.ipset4, h.names.ipset6} {
		if _, err := runIn(context.Background(), h.netns, "ipset", nil, "destroy", set); err != nil && !strings.Contains(err.Error(), "does not exist") {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("uninstall node probe SNAT: %w", err)
	}
	return nil
}

// Close has nothing to release: every operation runs a command.
func (h *iptablesHostSNAT) Close() error { return nil }

func (h *iptablesHostSNAT) Retain(keep []netip.Addr) error {
	var stale []netip.Addr
	for _, set := range []string{h.names.ipset4, h.names.ipset6} {
		out, err := runIn(context.Background(), h.netns, "ipset", nil, "list", set, "-output", "plain")
		if err != nil {
			return fmt.Errorf("node probe SNAT: %w", err)
		}
		members := false
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "Members:") {
				members = true
				continue
			}
			if ip, err := netip.ParseAddr(strings.TrimSpace(line)); members && err == nil && !slices.Contains(keep, ip.Unmap()) {
				stale = append(stale, ip.Unmap())
			}
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return h.Delete(stale)
}
