package cri

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Listing is a connection to the runtime's CRI API as the reconciler
// uses it (a *Lister).
type Listing interface {
	// RunningPods lists the ready sandboxes: pods is nil when the runtime
	// could not be listed; unreadable names running pods left out of the
	// list (see the package's documentation).
	RunningPods(ctx context.Context) (pods []enroll.Pod, unreadable []string, err error)
	// Runtime names the runtime and its version.
	Runtime() (name, version string)
	Close() error
}

var _ Listing = (*Lister)(nil)

// ReconciledCore is the part of the core the reconciler drives.
type ReconciledCore interface {
	Pods() []enroll.PodStatus
	Forgetter
}

var _ ReconciledCore = (*enroll.Core)(nil)

// ReconcilerConfig says how often to list, what to trust and what else a
// listing is for; both modes run one reconciler.
type ReconcilerConfig struct {
	// Interval is how often the runtime's pods are listed.
	Interval time.Duration
	// Grace is how long a known pod must be missing from every listing
	// before it is forgotten (see Absences).
	Grace time.Duration
	// Unheard names, for the log, the removal that never reached meshlet
	// when a pod in the mesh is forgotten ("its CNI DEL").
	Unheard string
	// Dial connects to the runtime when Run has no Listing; it is tried
	// again at each interval until it works.
	Dial func(ctx context.Context) (Listing, error)
	// Check, if set, says why a listing must not be used (it may be
	// another runtime's); nil accepts it. Refusals are logged once per
	// reason.
	Check func(l Listing, known []enroll.PodStatus, pods []enroll.Pod, unreadable []string) error
	// Listed, if set, gets each listing used, after the pods it showed
	// gone were forgotten; known is what the core held before it was
	// taken.
	Listed func(ctx context.Context, now time.Time, known []enroll.PodStatus, pods []enroll.Pod)
	// Missed counts the pods forgotten that were in the mesh (their
	// removal never reached meshlet).
	Missed func(n int)
}

// Reconciler keeps the core in step with the runtime's listings of its
// running pods: it forgets the pods a listing no longer shows once Grace
// has passed (their removal never reached meshlet) and hands each listing
// to Listed. NRI mode runs it for the removals a restarted runtime never
// sends; CNI mode for lost DELs and pods that started outside the chain.
type Reconciler struct {
	core     ReconciledCore
	cfg      ReconcilerConfig
	absences *Absences
	trigger  chan struct{}
	// refused says why listings are not used now, "" when they are.
	refused string
}

// NewReconciler returns a reconciler of core; run it with Run.
func NewReconciler(core ReconciledCore, cfg ReconcilerConfig) *Reconciler {
	return &Reconciler{core: core, cfg: cfg, absences: NewAbsences(cfg.Grace), trigger: make(chan struct{}, 1)}
}

// Trigger asks for a listing soon, a second from now (a pod set up just
// before then has finished its sandbox and is listed). It never blocks.
func (r *Reconciler) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Run lists every Interval, and soon after a Trigger, until ctx ends.
// With l nil it dials the runtime (Dial) first, and closes what it
// dialled when it returns; a Listing given stays the caller's.
func (r *Reconciler) Run(ctx context.Context, l Listing) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	var dialled Listing
	defer func() {
		if dialled != nil {
			_ = dialled.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.trigger:
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if l == nil {
			dctx, cancel := context.WithTimeout(ctx, ListTimeout)
			d, err := r.cfg.Dial(dctx)
			cancel()
			if err != nil {
				r.refuse(ctx, fmt.Errorf("the runtime's CRI socket (--cri-socket): %w", err))
				continue
			}
			l, dialled = d, d
		}
		r.Pass(ctx, l, time.Now())
	}
}

// Pass takes one listing, begun at now, and converges the core with it.
// Pods the listing could not read count as present.
func (r *Reconciler) Pass(ctx context.Context, l Listing, now time.Time) {
	logger := klog.FromContext(ctx)
	known := r.core.Pods()
	lctx, cancel := context.WithTimeout(ctx, ListTimeout)
	pods, unreadable, err := l.RunningPods(lctx)
	cancel()
	if err != nil && pods == nil {
		r.refuse(ctx, err)
		return
	}
	if err != nil {
		logger.Error(err, "Some running pods cannot be read: they count as running", "podUIDs", unreadable)
	}
	if r.cfg.Check != nil {
		if err := r.cfg.Check(l, known, pods, unreadable); err != nil {
			r.refuse(ctx, err)
			return
		}
	}
	if r.refused != "" {
		logger.Info("Listing the runtime's pods again")
		r.refused = ""
	}
	gone := r.absences.Observe(now, known, pods, unreadable)
	if missed := ForgetGone(ctx, r.core, gone, r.cfg.Unheard); missed > 0 && r.cfg.Missed != nil {
		r.cfg.Missed(missed)
	}
	if r.cfg.Listed != nil {
		r.cfg.Listed(ctx, now, known, pods)
	}
	if len(gone) > 0 {
		logger.V(2).Info("Reconciled with the runtime's pods", "pods", len(pods), "forgotten", len(gone))
	}
}

// Refused says why listings are not used now; "" when they are.
func (r *Reconciler) Refused() string { return r.refused }

// refuse logs why listings are not used, once per reason.
func (r *Reconciler) refuse(ctx context.Context, why error) {
	if why.Error() == r.refused {
		return
	}
	r.refused = why.Error()
	klog.FromContext(ctx).Error(why, "Cannot use the runtime's pod listing: a pod whose removal does not reach meshlet stays known until it can")
}
