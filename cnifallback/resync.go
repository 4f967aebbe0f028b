package cnifallback

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/enroll"
)

const (
	// deletedTTL is how long a served DEL keeps a listing from enrolling
	// its pod again: far longer than a sandbox takes to stop.
	deletedTTL = 10 * time.Minute
	// startRetries is how many times the start-up listing is taken again
	// while some running pods cannot be read: reconciling without them
	// would take them for gone.
	startRetries = 5
)

// missingGrace is how long a known pod must be missing from every listing
// before it is forgotten: longer than a sandbox may take between its ADD
// and being listed as ready (the kubelet's runtime request timeout is
// 2 minutes), and at least two listings.
func (f *Fallback) missingGrace() time.Duration {
	return max(2*time.Minute, 2*f.cfg.ResyncInterval)
}

// list takes one listing, bounded by cri.ListTimeout.
func list(ctx context.Context, lister cri.Listing) ([]enroll.Pod, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, cri.ListTimeout)
	defer cancel()
	return lister.RunningPods(ctx)
}

// syncAtStart reconciles the core with the pods running now: checkpointed
// pods are adopted, pods removed while meshlet was away are forgotten,
// and pods that started without meshlet are enrolled late. It retries
// until the runtime answers.
func (f *Fallback) syncAtStart(ctx context.Context, lister cri.Listing) error {
	logger := klog.FromContext(ctx)
	var pods []enroll.Pod
	for attempt, backoff := 1, 100*time.Millisecond; ; attempt, backoff = attempt+1, min(2*backoff, 5*time.Second) {
		var unreadable []string
		var err error
		pods, unreadable, err = list(ctx, lister)
		switch {
		case err == nil:
		case pods == nil:
			logger.Error(err, "Listing the runtime's pods (retrying)")
		case attempt < startRetries:
			logger.Error(err, "Some running pods cannot be read (retrying)", "podUIDs", unreadable)
		default:
			// Reconcile treats them as gone: their checkpointed records are
			// dropped and they are enrolled again once readable.
			logger.Error(err, "Some running pods cannot be read: reconciling without them", "podUIDs", unreadable)
			err = nil
		}
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	lateEnrolled, err := f.deps.Core.Reconcile(ctx, pods)
	for _, p := range lateEnrolled {
		logger.Info("Pod enrolled late: it started while meshlet was not in the CNI chain", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.UID)
	}
	late := len(lateEnrolled)
	f.deps.Metrics.LateEnrolled(late)
	if err != nil {
		logger.Error(err, "Some running pods could not be reconciled")
	}
	if f.deps.AfterSync != nil {
		f.deps.AfterSync(ctx)
	}
	logger.Info("Synchronized with the runtime's pods", "pods", len(pods), "lateEnrolled", late)
	return nil
}

// newReconciler is CNI mode's reconciler: a known pod missing from every
// listing for missingGrace is forgotten (its DEL never reached the
// agent), unless the core changed its state since it went missing (an ADD
// of a new sandbox); each listing also enrolls the pods that started
// outside the chain (enrollListed).
func (f *Fallback) newReconciler() *cri.Reconciler {
	return cri.NewReconciler(f.deps.Core, cri.ReconcilerConfig{Interval: f.cfg.ResyncInterval, Grace: f.missingGrace(),
		Unheard: "its CNI DEL", Listed: f.enrollListed, Missed: f.deps.Metrics.MissedRemovals})
}

// enrollListed enrolls, from one listing taken at now, the listed pods
// the core did not know or had failed (known is what it held before the
// listing): they started while meshlet-cni was not in the chain, or their
// enrollment is tried again. A pod whose DEL the agent served is left
// alone.
func (f *Fallback) enrollListed(ctx context.Context, now time.Time, known []enroll.PodStatus, pods []enroll.Pod) {
	logger := klog.FromContext(ctx)
	before := make(map[string]enroll.PodStatus, len(known))
	for _, st := range known {
		before[st.UID] = st
	}
	f.mu.Lock()
	for id, at := range f.deleted {
		if now.Sub(at) > deletedTTL {
			delete(f.deleted, id)
		}
	}
	var retry []enroll.Pod
	for _, p := range pods {
		if _, deleted := f.deleted[p.SandboxID]; deleted {
			continue
		}
		if st, known := before[p.UID]; !known || st.State == enroll.StateFailed {
			retry = append(retry, p)
		}
	}
	f.mu.Unlock()

	late := 0
	for _, p := range retry {
		if st, known := f.deps.Core.Status(p.UID); known && st.State != enroll.StateFailed {
			continue // an ADD got there first
		} else if known && !enroll.SameSandbox(st.SandboxID, p.SandboxID) && st.Since.After(now) {
			continue // an ADD of a newer sandbox failed after the listing: the listing is older news
		}
		res, err := f.deps.Core.EnrollRunning(ctx, p)
		if f.deletedSince(p.SandboxID, now) {
			// Its DEL was served while it was being enrolled: the sandbox
			// is going, so nothing of it may stay.
			if err := f.deps.Core.Forget(ctx, p.UID, p.SandboxID); err != nil {
				logger.Error(err, "Forgetting a pod deleted during its late enrollment", "podUID", p.UID)
			}
			continue
		}
		switch {
		case err != nil:
			logger.Error(err, "Enrolling a running pod (retried at the next listing)", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.UID)
		case res.Enrolled && res.Changed:
			late++
			logger.Info("Pod enrolled late: it started while meshlet-cni was not in the CNI chain", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.UID)
		}
	}
	if late > 0 {
		f.deps.Metrics.LateEnrolled(late)
	}
}

// deletedSince is whether the agent served the sandbox's DEL at or after
// t.
func (f *Fallback) deletedSince(sandboxID string, t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.deleted[sandboxID]
	return ok && !at.Before(t)
}
