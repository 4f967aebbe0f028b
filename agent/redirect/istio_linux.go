package redirect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/enroll"
)

// What istio-cni writes in a pod's network namespace, for a pod meshlet
// takes over from it: with its iptables backend, the chains ISTIO_PRERT and
// ISTIO_OUTPUT in the mangle, nat and raw tables and the rules of the
// built-in chains that jump to them (istio.io/istio cni/pkg/iptables);
// with its nftables backend (Istio 1.28+), tables of its own.
var (
	istioChains       = []string{chainPrert, chainOutput}
	istioTables       = tableOrder
	istioNativeTables = []string{"istio-ambient-nat", "istio-ambient-mangle", "istio-ambient-raw"}
)

// removeIstioRules takes istio-cni's in-pod rules out of the network
// namespace at netnsFd, in one transaction: its native nftables tables,
// and, with chains, its iptables chains as the nft variant of iptables
// keeps them, with the rules that jump to them (without chains: the
// iptables backend's own rules are those chains). Anything else stays,
// the other rules of the same iptables tables included. It returns what it
// removed (nothing, for a pod without them). Rules of the legacy iptables
// variant are not seen: netlink does not show them.
//
// Call it once meshlet's own rules are in: between the two, the pod's
// traffic is redirected twice to the same ports, never not at all. A
// deletion costs the kernel an RCU grace period (milliseconds), so it does
// not belong inside a runtime's hook.
func removeIstioRules(netnsFd int, chains bool) ([]string, error) {
	c, err := nftables.New(nftables.WithNetNSFd(netnsFd), nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("nftables: list tables: %w", err)
	}
	var removed []string
	for _, t := range tables {
		switch {
		case t.Family == nftables.TableFamilyINet && slices.Contains(istioNativeTables, t.Name):
			c.DelTable(t)
			removed = append(removed, "table inet "+t.Name)
		case chains && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) && slices.Contains(istioTables, t.Name):
			r, err := removeIstioChains(c, t)
			if err != nil {
				return nil, err
			}
			if r != "" {
				removed = append(removed, r)
			}
		}
	}
	if len(removed) == 0 {
		return nil, nil
	}
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Removed meanwhile (a concurrent Remove of the pod's rules):
			// the transaction changed nothing, and nothing is left to do.
			return nil, nil
		}
		return nil, fmt.Errorf("nftables: remove istio-cni's rules (%s): %w", strings.Join(removed, ", "), err)
	}
	return removed, nil
}

// removeIstioChains queues, in iptables table t (as the nft variant keeps
// it), the deletion of the rules that jump to istio-cni's chains, then of
// those chains, and says what it queued ("" for nothing).
func removeIstioChains(c *nftables.Conn, t *nftables.Table) (string, error) {
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return "", fmt.Errorf("nftables: list chains of %s: %w", familyName(t), err)
	}
	var istio, others []*nftables.Chain
	for _, ch := range chains {
		switch {
		case ch.Table.Name != t.Name:
		case slices.Contains(istioChains, ch.Name):
			istio = append(istio, ch)
		default:
			others = append(others, ch)
		}
	}
	if len(istio) == 0 {
		return "", nil
	}
	jumps := 0
	for _, ch := range others {
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return "", fmt.Errorf("nftables: list rules of %s %s: %w", familyName(t), ch.Name, err)
		}
		for _, r := range rules {
			if jumpsToIstio(r) {
				c.DelRule(r)
				jumps++
			}
		}
	}
	names := make([]string, 0, len(istio))
	for _, ch := range istio {
		c.FlushChain(ch)
		c.DelChain(ch)
		names = append(names, ch.Name)
	}
	return fmt.Sprintf("%s: chains %s and %d jumps", familyName(t), strings.Join(names, ", "), jumps), nil
}

// jumpsToIstio is whether r jumps (or goes) to one of istio-cni's chains.
func jumpsToIstio(r *nftables.Rule) bool {
	for _, e := range r.Exprs {
		if v, ok := e.(*expr.Verdict); ok && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) && slices.Contains(istioChains, v.Chain) {
			return true
		}
	}
	return false
}

// familyName names an iptables table as iptables-save does ("ip nat").
func familyName(t *nftables.Table) string {
	if t.Family == nftables.TableFamilyIPv6 {
		return "ip6 " + t.Name
	}
	return "ip " + t.Name
}

// HasIstioRules reports whether the network namespace at netnsPath holds
// in-pod rules of istio-cni's: its iptables chain ISTIO_PRERT as the nft
// variant keeps it, or its native nftables tables. It reads only: it is
// cheap enough for a runtime's hook (one listing of tables and chains).
// Rules of the legacy iptables variant are not seen.
func HasIstioRules(netnsPath string) (bool, error) {
	f, err := os.Open(netnsPath)
	if err != nil {
		return false, fmt.Errorf("open the pod's network namespace: %w", err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	chains, err := c.ListChains()
	if err != nil {
		return false, fmt.Errorf("nftables: list chains: %w", err)
	}
	for _, ch := range chains {
		switch {
		case ch.Table.Family == nftables.TableFamilyINet && slices.Contains(istioNativeTables, ch.Table.Name),
			(ch.Table.Family == nftables.TableFamilyIPv4 || ch.Table.Family == nftables.TableFamilyIPv6) && ch.Table.Name == "nat" && ch.Name == chainPrert:
			return true, nil
		}
	}
	return false, nil
}

// HandBack rewrites the rules of the enrolled pod w as Istio's own, for a
// pod meshlet leaves running when it is uninstalled: istio-cni's rules
// (its iptables chains, nft variant, which the iptables backend writes
// verbatim) go in, then meshlet's nftables table goes, so the pod is
// never unredirected, and istio-cni, or a later meshlet, adopts rules it
// knows whole. With the iptables backend (nft variant) the pod's rules
// are Istio's already. It needs iptables-nft-restore (in meshlet's
// image); without it, the error says so and the pod keeps meshlet's rules.
func (r *Redirector) HandBack(ctx context.Context, w *enroll.Workload) error {
	own, iptablesBackend := r.backend.(*iptablesBackend)
	if iptablesBackend && own.variant == VariantNft {
		return nil // Istio's rules already
	}
	p, ok := r.planOf(w.Redirection)
	if !ok {
		var err error
		if p, err = PlanFor(w.IPs, w.Settings, r.ipv6.Load()); err != nil {
			return err
		}
	}
	ipt, err := newIptables(VariantNft, r.cfg.HostNetnsFd)
	if err != nil {
		return fmt.Errorf("write Istio's rules: %w", err)
	}
	return w.Netns.WithFd(func(fd int) error {
		if err := ipt.apply(ctx, fd, p); err != nil {
			return fmt.Errorf("write Istio's rules: %w", err)
		}
		if iptablesBackend {
			return own.remove(ctx, fd) // the legacy variant's chains
		}
		return removeNftables(fd)
	})
}
