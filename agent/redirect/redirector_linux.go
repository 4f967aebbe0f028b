package redirect

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Redirector implements the core's Redirector port.
type Redirector struct {
	cfg Config
	// ipv6 is the node's IPv6 setting now: Config.IPv6, then SetIPv6.
	ipv6 atomic.Bool
	// accounts are the accounts of every plan, by planIndex: Account runs
	// on the no-op path of every re-decision of an enrolled pod (the
	// CreateContainer gate, Synchronize, the watchers).
	accounts [16]string
	backend  podBackend
	host     hostSNAT
	probe    *probeSNAT // host, as enrollments change it
	takeover *takeover
}

var _ enroll.Redirector = (*Redirector)(nil)

// New sets up the node side (probe SNAT) and the chosen pod backend.
func New(cfg Config) (*Redirector, error) {
	r := &Redirector{cfg: cfg}
	r.ipv6.Store(cfg.IPv6)
	r.fillAccounts()
	switch cfg.Backend {
	case BackendNftables, "":
		r.backend = nftBackend{}
		h, err := newNftHostSNAT(cfg.HostNetnsFd, cfg.nodeNames().table)
		if err != nil {
			return nil, err
		}
		r.host = h
		r.takeover = newTakeover(true, false)
	case BackendIptables:
		ipt, err := newIptables(cfg.IptablesVariant, cfg.HostNetnsFd)
		if err != nil {
			return nil, err
		}
		r.backend = ipt
		h, err := newIptablesHostSNAT(ipt, cfg.HostNetnsFd, cfg.nodeNames())
		if err != nil {
			return nil, err
		}
		r.host = h
		// With the nft variant, istio-cni's chains are this backend's
		// own: the apply rewrote them in place.
		r.takeover = newTakeover(ipt.variant != VariantNft, true)
	default:
		return nil, fmt.Errorf("unknown redirect backend %q", cfg.Backend)
	}
	r.probe = newProbeSNAT(r.host)
	return r, nil
}

// Check says whether the backend can run here, changing nothing: a
// meshlet waiting to take over a node checks it before it reports Ready.
// nftables: a read of the node's tables (nfnetlink needs CAP_NET_ADMIN);
// iptables: the variant's binaries, found and run (save only), and ipset
// listing the node's sets.
func Check(cfg Config) error {
	switch cfg.Backend {
	case BackendNftables, "":
		c, err := hostConn(cfg.HostNetnsFd)
		if err != nil {
			return fmt.Errorf("nftables: %w", err)
		}
		defer func() { _ = c.CloseLasting() }()
		if _, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err != nil {
			return fmt.Errorf("nftables: list the node's tables: %w", err)
		}
		return nil
	case BackendIptables:
		ipt, err := newIptables(cfg.IptablesVariant, cfg.HostNetnsFd)
		if err != nil {
			return err
		}
		if _, err := ipt.save(context.Background(), cfg.HostNetnsFd, IPv4); err != nil {
			return fmt.Errorf("iptables (%s variant): %w", ipt.variant, err)
		}
		// The node's probe SNAT set (the ip_set module, and NET_ADMIN).
		if _, err := runIn(context.Background(), cfg.HostNetnsFd, "ipset", nil, "list", "-n"); err != nil {
			return fmt.Errorf("iptables backend: ipset: %w", err)
		}
		return nil
	}
	return fmt.Errorf("unknown redirect backend %q", cfg.Backend)
}

type nftBackend struct{}

// The nftables backend writes in-process over netlink, in one batch that
// waits on no lock: it needs no deadline.
func (nftBackend) apply(_ context.Context, fd int, p Plan) error { return applyNftables(fd, p) }
func (nftBackend) remove(_ context.Context, fd int) error        { return removeNftables(fd) }
func (nftBackend) present(fd int) (bool, error)                  { return hasNftTable(fd) }

// Apply programs the pod: routing, in-pod rules, node-side SNAT. The three
// are independent kernel transactions and run concurrently (the in-pod
// batch dominates; the others hide behind it), which keeps the runtime's
// hook short. It returns its account of the rules (backend and plan).
//
// Without a prior record, a failed Apply undoes everything and the error
// names the step. With one, the pod runs with prior's rules (a previous
// agent's, or this agent's before a settings change), and a failed Apply
// leaves them as they were: a running pod never loses its redirection to
// a failed rewrite. Rules are replaced in place (nftables: one atomic
// batch; iptables: one restore per family), so a running pod has no
// moment without them; the routing and SNAT entries prior needed and the
// new plan does not go once the new rules are in.
//
// With a prior record whose account is the same, and meshlet's rules still
// in the pod, the rules are kept: rewriting them costs an RCU grace period
// per pod when a restarted agent adopts every running pod. Routing and
// node SNAT are re-asserted (idempotent).
//
// A pod the node's settings would refuse now (only IPv6 addresses, IPv6
// off) is refused, unless prior says its rules were programmed with IPv6
// on: then they are kept as prior names them (see keepRefused).
//
// A running pod (w.Running) may be one istio-cni meshed: once meshlet's
// rules are in, istio-cni's are removed in the background (takeover), so
// its traffic never bypasses ztunnel. So are meshlet's rules of its other
// backend (--redirect-backend changed): each pod moves to the new backend
// without a moment unmeshed.
func (r *Redirector) Apply(ctx context.Context, w *enroll.Workload, prior *enroll.Record) (string, error) {
	p, err := PlanFor(w.IPs, w.Settings, r.ipv6.Load())
	if err != nil {
		return r.keepRefused(ctx, w, prior, err)
	}
	account := r.account(p)
	err = w.Netns.WithFd(func(fd int) error { return r.apply(ctx, fd, w.UID, w.IPs, p, r.previous(prior, account)) })
	if err != nil {
		return "", err
	}
	if w.Running {
		// A running pod meshlet did not mesh may be istio-cni's; one a
		// previous meshlet programmed with its other backend has that
		// backend's rules; one a previous meshlet adopted may have been
		// left before its removal ran. Where there is nothing to
		// remove, the removal only reads.
		r.takeover.clear(klog.FromContext(ctx), w)
	}
	return account, nil
}

// keepRefused adopts, as a previous agent left it, a running pod whose
// rules the node's settings would refuse now: IPv6 was on when that agent
// programmed the pod, and is off now. Its rules stay (or, where they are
// gone or the backend cannot tell, are written as that agent wrote them),
// routing and node SNAT are re-asserted, and the account is that plan's:
// a setting that cannot apply to a running pod does not take it out of
// the mesh across a restart either. Rules an older meshlet wrote (another
// RulesVersion, the same backend and plan) are rewritten as this one
// writes that plan. Any other pod gets refusal.
func (r *Redirector) keepRefused(ctx context.Context, w *enroll.Workload, prior *enroll.Record, refusal error) (string, error) {
	if prior == nil {
		return "", refusal
	}
	p, err := PlanFor(w.IPs, w.Settings, true)
	if err != nil {
		return "", refusal
	}
	account := r.account(p)
	if prior.Redirection != account && !r.samePlan(prior.Redirection, p) {
		return "", refusal
	}
	err = w.Netns.WithFd(func(fd int) error { return r.apply(ctx, fd, w.UID, w.IPs, p, r.previous(prior, account)) })
	if err != nil {
		return "", err
	}
	klog.FromContext(ctx).Info("Kept the redirection of a running pod the node's settings would refuse now", "redirection", account, "previous", prior.Redirection, "reason", refusal)
	return account, nil
}

// previous is what a prior record says the pod runs with, for apply.
type previous struct {
	// keep: prior's account is the one apply writes, so rules still in
	// the pod can stay.
	keep bool
	// plan is prior's plan where this redirector can write it again (its
	// account is one of this backend's and rules version's).
	plan  Plan
	known bool
	ips   []netip.Addr
}

// previous describes prior for apply, which writes account; nil for none.
func (r *Redirector) previous(prior *enroll.Record, account string) *previous {
	if prior == nil {
		return nil
	}
	prev := &previous{keep: prior.Redirection == account, ips: prior.IPs}
	prev.plan, prev.known = r.planOf(prior.Redirection)
	return prev
}

// planOf is the plan whose account is account, if this redirector writes
// it (same backend, same rules version).
func (r *Redirector) planOf(account string) (Plan, bool) {
	for i, a := range r.accounts {
		if a != "" && a == account {
			return indexPlan(i), true
		}
	}
	return Plan{}, false
}

// samePlan reports whether account (a record's Redirection, of any rules
// version) is this redirector's backend with plan p.
func (r *Redirector) samePlan(account string, p Plan) bool {
	backend, plan, ok := parseAccount(account)
	return ok && backend == r.backendName() && plan == p.String()
}

// parseAccount splits an account ("nftables/v1 ipv4 dns-capture") into
// its backend and its plan.
func parseAccount(account string) (backend Backend, plan string, ok bool) {
	head, plan, ok := strings.Cut(account, " ")
	b, _, _ := strings.Cut(head, "/")
	return Backend(b), plan, ok
}

// Account is what Apply would return for a pod with rec's addresses and
// settings now.
func (r *Redirector) Account(rec *enroll.Record) (string, error) {
	ipv6 := r.ipv6.Load()
	has4, has6 := families(rec.IPs)
	if !has4 && !(has6 && ipv6) {
		_, err := PlanFor(rec.IPs, rec.Settings, ipv6) // the refusal, as Apply words it
		return "", err
	}
	return r.accounts[planIndex(has4, has6 && ipv6, rec.Settings.DNSCapture, !rec.Settings.BypassInbound)], nil
}

// planIndex numbers a plan by what it holds: IPv4, IPv6, DNS capture,
// inbound capture.
func planIndex(v4, v6, dns, inbound bool) int {
	i := 0
	for bit, set := range []bool{v4, v6, dns, inbound} {
		if set {
			i |= 1 << bit
		}
	}
	return i
}

// fillAccounts computes accounts.
func (r *Redirector) fillAccounts() {
	for i := range r.accounts {
		if p := indexPlan(i); len(p.Families) > 0 {
			r.accounts[i] = r.account(p)
		}
	}
}

// indexPlan is the plan planIndex numbers i.
func indexPlan(i int) Plan {
	p := Plan{DNSCapture: i&4 != 0, InboundCapture: i&8 != 0}
	if i&1 != 0 {
		p.Families = append(p.Families, IPv4)
	}
	if i&2 != 0 {
		p.Families = append(p.Families, IPv6)
	}
	return p
}

// SetIPv6 turns IPv6 redirection on or off for what Apply programs from
// now on. Running pods follow as the core converges them again: their
// account (Account) changes.
func (r *Redirector) SetIPv6(on bool) { r.ipv6.Store(on) }

// account is what a pod's record keeps of its rules: backend, rules
// version and plan ("nftables/v1 ipv4+ipv6 dns-capture inbound-capture").
func (r *Redirector) account(p Plan) string {
	return fmt.Sprintf("%s/v%d %s", r.backendName(), RulesVersion, p)
}

// backendName is the pod backend's name in accounts.
func (r *Redirector) backendName() Backend {
	if r.cfg.Backend == "" {
		return BackendNftables
	}
	return r.cfg.Backend
}

func (r *Redirector) apply(ctx context.Context, fd int, uid string, ips []netip.Addr, p Plan, prev *previous) error {
	logger := klog.FromContext(ctx)
	var routeErr, hostErr error
	var wg sync.WaitGroup
	wg.Go(func() { hostErr = r.probe.add(uid, ips) })
	_, nft := r.backend.(nftBackend)
	socks, routeErr := openPodSockets(fd, nft)
	var ruleErr error
	wroteRules := routeErr == nil
	switch {
	case routeErr != nil:
	case prev != nil && prev.keep && r.rulesPresent(fd):
		logger.V(2).Info("Kept the redirection a previous agent applied", "plan", p)
		wroteRules = false
		routeErr = socks.routing().apply(p.Families)
	default:
		wg.Go(func() { routeErr = socks.routing().apply(p.Families) })
		if nft {
			ruleErr = applyNftablesOn(socks.nft, p)
		} else {
			ruleErr = r.backend.apply(ctx, fd, p)
		}
	}
	wg.Wait()
	if socks != nil {
		socks.close()
	}
	err := errors.Join(routeErr, ruleErr, hostErr)
	switch {
	case err == nil && prev != nil:
		r.dropPrevious(ctx, fd, uid, ips, p, prev)
	case err != nil && prev == nil:
		return r.undo(ctx, fd, uid, ips, hostErr == nil, err)
	case err != nil:
		return r.restore(ctx, fd, uid, ips, hostErr == nil, wroteRules, prev, err)
	}
	logger.V(4).Info("Redirection applied", "plan", p)
	return nil
}

// undo removes what a failed apply of a new pod's redirection put in
// place; err is the failure, returned with the undo's own.
func (r *Redirector) undo(ctx context.Context, fd int, uid string, ips []netip.Addr, snatAdded bool, err error) error {
	errs := []error{err}
	if snatAdded {
		if err := r.probe.delete(uid, ips); err != nil {
			errs = append(errs, fmt.Errorf("undo node SNAT: %w", err))
		}
	}
	// The undo runs even when ctx's deadline is what failed the apply.
	undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := r.backend.remove(undo, fd); err != nil {
		errs = append(errs, fmt.Errorf("undo rules: %w", err))
	}
	if err := removeRouting(fd); err != nil {
		errs = append(errs, fmt.Errorf("undo routing: %w", err))
	}
	return errors.Join(errs...)
}

// restore puts a running pod back on the redirection prev describes after
// a failed apply (err): nothing it needed is removed, its rules are
// written again as prev's plan where the apply wrote some (an nftables
// batch that failed changed nothing; an iptables family restored before
// the failure did), and only the SNAT entries prev did not have go.
func (r *Redirector) restore(ctx context.Context, fd int, uid string, ips []netip.Addr, snatAdded, wroteRules bool, prev *previous, err error) error {
	errs := []error{err}
	if snatAdded {
		if err := r.probe.delete(uid, without(ips, prev.ips)); err != nil {
			errs = append(errs, fmt.Errorf("undo node SNAT: %w", err))
		}
	}
	if wroteRules && prev.known {
		undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		if err := r.backend.apply(undo, fd, prev.plan); err != nil {
			errs = append(errs, fmt.Errorf("restore the previous rules (%s): %w", prev.plan, err))
		}
	}
	return errors.Join(errs...)
}

// dropPrevious removes, once the new rules are in, the routing and SNAT
// entries of prev that the new plan p and addresses ips do not need (an
// IPv6 family turned off, an address the pod no longer has). Best effort:
// what stays is inert without rules that mark packets for it.
func (r *Redirector) dropPrevious(ctx context.Context, fd int, uid string, ips []netip.Addr, p Plan, prev *previous) {
	logger := klog.FromContext(ctx)
	if stale := without(prev.ips, ips); len(stale) > 0 {
		if err := r.probe.delete(uid, stale); err != nil {
			logger.Error(err, "Removing the node SNAT entries of addresses the pod no longer has", "addresses", stale)
		}
	}
	if !prev.known {
		return
	}
	var gone []Family
	for _, f := range prev.plan.Families {
		if !slices.Contains(p.Families, f) {
			gone = append(gone, f)
		}
	}
	if len(gone) > 0 {
		if err := removeRouting(fd, gone...); err != nil {
			logger.Error(err, "Removing the routing of families the pod's rules no longer capture", "families", gone)
		}
	}
}

// without is the addresses of a that are not in b.
func without(a, b []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range a {
		if !slices.Contains(b, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// undoTimeout bounds the undo of a failed apply.
const undoTimeout = 5 * time.Second

func (r *Redirector) rulesPresent(fd int) bool {
	has, err := r.backend.present(fd)
	return err == nil && has
}

// Remove undoes Apply. RemoveHostOnly never touches the pod's netns.
func (r *Redirector) Remove(ctx context.Context, w *enroll.Workload, scope enroll.RemoveScope) error {
	var errs []error
	if err := r.probe.delete(w.UID, w.IPs); err != nil {
		errs = append(errs, err)
	}
	if scope == enroll.RemoveAll {
		errs = append(errs, w.Netns.WithFd(func(fd int) error {
			// Rules istio-cni left go too: without a proxy for the
			// pod, they would blackhole its traffic.
			_, istioErr := removeIstioRules(fd, r.takeover.chains)
			var nftErr error
			if r.takeover.nftables {
				nftErr = removeNftables(fd) // a previous meshlet's other backend
			}
			return errors.Join(r.backend.remove(ctx, fd), istioErr, nftErr, removeRouting(fd))
		}))
	}
	return errors.Join(errs...)
}

// RetainNodeState drops node-side state (probe SNAT addresses) of every pod
// not in keep: call it once the running pods are known (after the runtime's
// Synchronize), to clean up after pods removed while no agent ran. An
// address this redirector added and has not deleted is kept too, so a pod
// enrolled while keep was being computed keeps its entry.
func (r *Redirector) RetainNodeState(keep []netip.Addr) error { return r.probe.retain(keep) }

// Close releases the redirector's resources and leaves every rule in place
// (an agent restart must not unmesh running pods). It waits for the
// takeovers under way.
func (r *Redirector) Close() error {
	r.Settle()
	return r.host.Close()
}

// Settle returns once the removals running in the background, of rules
// istio-cni or a previous meshlet's other backend left in running pods,
// have ended; each holds a descriptor of its pod's namespace meanwhile.
func (r *Redirector) Settle() { r.takeover.wait() }

// UninstallNode removes every node-side object meshlet created (the probe
// SNAT table, or chain and ipsets): meshlet is being uninstalled. Pods'
// own rules are not touched.
func (r *Redirector) UninstallNode() error { return r.host.Uninstall() }
