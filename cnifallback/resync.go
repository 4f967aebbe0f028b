package cnifallback

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// deletedTTL is how long a served DEL keeps a listing from enrolling its
// pod again: far longer than a sandbox takes to stop.
const deletedTTL = 10 * time.Minute

// syncAtStart reconciles the core with the pods running now: checkpointed
// pods are adopted, pods removed while meshlet was away are forgotten,
// and pods that started without meshlet are enrolled late. It retries
// until the runtime answers.
func (f *Fallback) syncAtStart(ctx context.Context, lister Lister) error {
	logger := klog.FromContext(ctx)
	var pods []enroll.Pod
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		var err error
		pods, err = lister.RunningPods(ctx)
		if err == nil {
			break
		}
		if pods != nil {
			// Some sandboxes could not be read: reconcile the rest; the
			// next listing retries them.
			logger.Error(err, "Listing the runtime's pods: some were skipped")
			break
		}
		logger.Error(err, "Listing the runtime's pods (retrying)")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	known := map[string]bool{}
	for _, p := range pods {
		// Enrolled by this meshlet, or by the previous one (adopted now):
		// either way it did not start unmeshed.
		st, ok := f.deps.Core.Status(p.UID)
		known[p.UID] = ok && st.State == enroll.StateEnrolled || f.deps.Core.Checkpointed(p.UID)
	}
	err := f.deps.Core.Reconcile(ctx, pods)
	late := 0
	for _, p := range pods {
		if st, _ := f.deps.Core.Status(p.UID); st.State == enroll.StateEnrolled && !known[p.UID] {
			late++
			logger.Info("Pod enrolled late: it started while meshlet was not in the CNI chain", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.UID)
		}
	}
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

// resyncLoop lists the runtime's pods every ResyncInterval, and soon after
// a Resync request.
func (f *Fallback) resyncLoop(ctx context.Context, lister Lister) {
	t := time.NewTicker(f.cfg.ResyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.trigger:
			// Let a pod created just before the re-assert finish its
			// sandbox, so that this listing sees it.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		f.resync(ctx, lister)
	}
}

// resync converges the core with one listing while ADDs and DELs are
// served: known pods missing from two listings in a row are forgotten
// (their DEL never reached the agent), and listed pods the core does not
// know are enrolled late (they started while meshlet-cni was not in the
// chain), unless the agent served their DEL.
func (f *Fallback) resync(ctx context.Context, lister Lister) {
	logger := klog.FromContext(ctx)
	before := map[string]bool{}
	for _, p := range f.deps.Core.Pods() {
		before[p.UID] = true
	}
	pods, err := lister.RunningPods(ctx)
	if err != nil {
		logger.Error(err, "Listing the runtime's pods")
		if pods == nil {
			return
		}
	}
	listed := make(map[string]bool, len(pods))
	for _, p := range pods {
		listed[p.UID] = true
	}
	f.mu.Lock()
	var gone []string
	missing := map[string]bool{}
	for uid := range before {
		switch {
		case listed[uid]:
		case f.missing[uid]:
			gone = append(gone, uid)
		default:
			missing[uid] = true
		}
	}
	f.missing = missing
	now := time.Now()
	for uid, at := range f.deleted {
		if now.Sub(at) > deletedTTL {
			delete(f.deleted, uid)
		}
	}
	var unknown []enroll.Pod
	for _, p := range pods {
		if _, deleted := f.deleted[p.UID]; !deleted && !before[p.UID] {
			unknown = append(unknown, p)
		}
	}
	f.mu.Unlock()

	for _, uid := range gone {
		logger.Info("Forgetting a pod the runtime no longer runs (its CNI DEL did not reach meshlet)", "podUID", uid)
		if err := f.deps.Core.Forget(ctx, uid); err != nil {
			logger.Error(err, "Forgetting a removed pod", "podUID", uid)
		}
	}
	late := 0
	for _, p := range unknown {
		if _, known := f.deps.Core.Status(p.UID); known {
			continue // an ADD got there first
		}
		res, err := f.deps.Core.Enroll(ctx, p)
		switch {
		case err != nil:
			logger.Error(err, "Enrolling a pod that started outside the CNI chain", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.UID)
		case res.Enrolled:
			late++
			logger.Info("Pod enrolled late: it started while meshlet-cni was not in the CNI chain", "pod", klog.KRef(p.Namespace, p.Name), "podUID", p.UID)
		}
	}
	if late > 0 {
		f.deps.Metrics.LateEnrolled(late)
	}
}
