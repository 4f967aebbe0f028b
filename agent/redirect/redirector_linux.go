package redirect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/netns"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Redirector implements the core's Redirector port.
type Redirector struct {
	cfg     Config
	backend podBackend
	host    HostSNAT

	mu      sync.Mutex
	adopted map[string]Adoption
}

// Adoption is a pod a previous agent enrolled (from the checkpoint): if the
// pod comes back with the same netns and settings and its table is there,
// Apply keeps the rules instead of rewriting them.
type Adoption struct {
	UID        string
	NetnsInode uint64
	IPs        []netip.Addr
	Options    enroll.Options
}

// Adopt registers pods for adoption (nftables backend only: its table can
// be checked cheaply; iptables pods are always rewritten).
func (r *Redirector) Adopt(pods []Adoption) {
	if _, ok := r.backend.(nftBackend); !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adopted = make(map[string]Adoption, len(pods))
	for _, p := range pods {
		r.adopted[p.UID] = p
	}
}

// adopt reports whether w is an adoptable pod whose rules are in place;
// each adoption is used once.
func (r *Redirector) adopt(fd int, w *enroll.Workload) bool {
	r.mu.Lock()
	a, ok := r.adopted[w.UID]
	delete(r.adopted, w.UID)
	r.mu.Unlock()
	if !ok || a.NetnsInode != w.Netns.Inode() || a.Options != w.Options || !slices.Equal(a.IPs, w.IPs) {
		return false
	}
	has, err := hasNftTable(fd)
	return err == nil && has
}

var _ enroll.Redirector = (*Redirector)(nil)

// New sets up the node side (probe SNAT) and the chosen pod backend.
func New(cfg Config) (*Redirector, error) {
	r := &Redirector{cfg: cfg}
	switch cfg.Backend {
	case BackendNftables, "":
		r.backend = nftBackend{}
		h, err := newNftHostSNAT(cfg.HostNetnsFd)
		if err != nil {
			return nil, err
		}
		r.host = h
	case BackendIptables:
		ipt, err := newIptables(cfg.IptablesVariant, cfg.HostNetnsFd)
		if err != nil {
			return nil, err
		}
		r.backend = ipt
		h, err := newIptablesHostSNAT(ipt, cfg.HostNetnsFd)
		if err != nil {
			return nil, err
		}
		r.host = h
	default:
		return nil, fmt.Errorf("unknown redirect backend %q", cfg.Backend)
	}
	return r, nil
}

type nftBackend struct{}

func (nftBackend) apply(fd int, p Plan) error { return applyNftables(fd, p) }
func (nftBackend) remove(fd int) error        { return removeNftables(fd) }

// Apply programs the pod: routing, in-pod rules, node-side SNAT. The three
// are independent kernel transactions and run concurrently (the in-pod
// batch dominates; the others hide behind it), which keeps the runtime's
// hook short. On any error everything is undone and the error names the
// step.
func (r *Redirector) Apply(ctx context.Context, w *enroll.Workload) error {
	p, err := PlanFor(w)
	if err != nil {
		return fmt.Errorf("redirect pod %s: %w", w.UID, err)
	}
	fd, err := podNetnsFd(w)
	if err != nil {
		return err
	}
	var routeErr, hostErr error
	var wg sync.WaitGroup
	wg.Go(func() { routeErr = applyRouting(fd, p.Families) })
	wg.Go(func() { hostErr = r.host.Add(w.IPs) })
	var ruleErr error
	if r.adopt(fd, w) {
		// A previous agent's rules for this very netns and settings:
		// keep them (rewriting costs an RCU grace period per pod at
		// start-up). Routing and node SNAT are re-asserted (idempotent).
		klog.FromContext(ctx).V(2).Info("Adopted the redirection a previous agent applied", "podUID", w.UID)
	} else {
		ruleErr = r.backend.apply(fd, p)
	}
	wg.Wait()
	if err := errors.Join(routeErr, ruleErr, hostErr); err != nil {
		errs := []error{err}
		if hostErr == nil {
			if err := r.host.Delete(w.IPs); err != nil {
				errs = append(errs, fmt.Errorf("undo node SNAT: %w", err))
			}
		}
		if err := r.backend.remove(fd); err != nil {
			errs = append(errs, fmt.Errorf("undo rules: %w", err))
		}
		if err := removeRouting(fd); err != nil {
			errs = append(errs, fmt.Errorf("undo routing: %w", err))
		}
		return fmt.Errorf("redirect pod %s: %w", w.UID, errors.Join(errs...))
	}
	klog.FromContext(ctx).V(4).Info("Redirection applied", "podUID", w.UID, "families", p.Families,
		"dnsCapture", p.DNSCapture, "inboundCapture", p.InboundCapture)
	return nil
}

// podNetnsFd returns the pod's netns fd after checking with the kernel that
// it still is a network namespace. Never skip this: the libraries below
// treat an invalid fd as "the current namespace", which is the node's.
func podNetnsFd(w *enroll.Workload) (int, error) {
	if w.Netns == nil {
		return -1, fmt.Errorf("redirect pod %s: no network namespace", w.UID)
	}
	fd := w.Netns.Fd()
	if fd > math.MaxInt32 {
		return -1, fmt.Errorf("redirect pod %s: network namespace handle is closed", w.UID)
	}
	if _, err := netns.Identify(int(fd)); err != nil {
		return -1, fmt.Errorf("redirect pod %s: %w", w.UID, err)
	}
	return int(fd), nil
}

// Remove undoes Apply. RemoveHostOnly never touches the pod's netns.
func (r *Redirector) Remove(ctx context.Context, w *enroll.Workload, scope enroll.RemoveScope) error {
	var errs []error
	if err := r.host.Delete(w.IPs); err != nil {
		errs = append(errs, err)
	}
	if scope == enroll.RemoveAll {
		fd, err := podNetnsFd(w)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := r.backend.remove(fd); err != nil {
			errs = append(errs, err)
		}
		if err := removeRouting(fd); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove redirection of pod %s: %w", w.UID, err)
	}
	return nil
}

// Uninstall removes every node-side object (meshlet is being removed from
// the node). Pods' in-pod rules are left to their Remove or their netns.
func (r *Redirector) Uninstall() error { return r.host.Uninstall() }

// RetainNodeState drops node-side state (probe SNAT addresses) of every pod
// not in keep: call it once the running pods are known (after the runtime's
// Synchronize), to clean up after pods removed while no agent ran.
func (r *Redirector) RetainNodeState(keep []netip.Addr) error { return r.host.Retain(keep) }

// Close releases the redirector's resources and leaves every rule in place
// (an agent restart must not unmesh running pods).
func (r *Redirector) Close() error { return r.host.Close() }
