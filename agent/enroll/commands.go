package enroll

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"
)

// SetDefaults makes d the node's per-pod settings from the next
// enrollment on. Pods already enrolled keep theirs until they are
// converged again (Reevaluate), which re-programs those whose settings
// change.
func (c *Core) SetDefaults(d Settings) { c.defaults.Store(&d) }

// Enroll brings a running pod to the state policy wants: enrolled (rules in
// place, ztunnel acked, netns held) or not. It is synchronous and
// idempotent: the same pod with the same netns is a no-op; another sandbox
// (the kubelet re-created it: an event that starts a sandbox is always
// about the pod's newest) or a new netns releases the old enrollment and
// enrolls the new one. An error with Result.Enrolled false means the pod should be meshed
// and is not, and nothing of the attempt is left behind; with Enrolled
// true, the pod stays enrolled as it was (a change of its rules that
// failed).
func (c *Core) Enroll(ctx context.Context, pod Pod) (Result, error) {
	if pod.UID == "" {
		return Result{}, errors.New("enroll: pod has no UID")
	}
	return c.enroll(ctx, pod, HandoverNow)
}

// EnrollRunning is Enroll for a pod that already runs, found by a listing
// of the runtime's pods rather than a hook: without a proxy connected it is
// registered for the next connection instead of failing, since failing
// would not stop a pod that runs already.
func (c *Core) EnrollRunning(ctx context.Context, pod Pod) (Result, error) {
	if pod.UID == "" {
		return Result{}, errors.New("enroll: pod has no UID")
	}
	return c.enroll(ctx, pod, HandoverDeferred)
}

func (c *Core) enroll(ctx context.Context, pod Pod, h Handover) (Result, error) {
	s, err := c.lockSlot(ctx, pod.UID, true)
	if err != nil {
		return Result{}, &Error{UID: pod.UID, Step: StepResolve, Err: err}
	}
	defer s.unlock()
	replaced := c.replaceSandbox(ctx, s, &pod)
	s.pod = pod
	res, err := c.converge(ctx, s, h)
	if replaced && !res.Enrolled && s.reported != RedirectionRemoved {
		c.report(s, RedirectionRemoved)
	}
	c.noted(ctx, s, h, err)
	return res, err
}

// replaceSandbox releases the pod's enrollment in a sandbox other than
// pod's: the kubelet re-created the sandbox, and the old one is stopping
// or gone. Only node-side state is removed (its rules go with its
// namespace), and ztunnel drops the old workload. It reports whether there
// was one. The slot is locked.
func (c *Core) replaceSandbox(ctx context.Context, s *slot, pod *Pod) bool {
	if s.enrolled == nil || SameSandbox(s.enrolled.SandboxID, pod.SandboxID) {
		return false
	}
	podLogger(ctx, pod).Info("Pod sandbox re-created: releasing the old one", "sandbox", pod.SandboxID, "oldSandbox", s.enrolled.SandboxID)
	if err := c.release(ctx, s, RemoveHostOnly, StateReleased, "sandbox replaced"); err != nil {
		podLogger(ctx, pod).Error(err, "Releasing the old sandbox reported an error; continuing", "oldSandbox", s.enrolled.SandboxID)
	}
	return true
}

// Release takes a stopping pod out of the mesh without entering its netns:
// ztunnel drops it, node-side state goes, the netns fd is closed. Unknown
// pods are a no-op, and so is the stop of a sandbox other than the pod's
// current one (sandboxID: the kubelet stops and removes a replaced sandbox
// while its successor runs; "" matches any). The pod is released even when
// a step reports an error; the error is returned for logging.
//
// A caller whose deadline passes while another operation on the pod runs
// is not kept waiting: the release is done once that operation ends, and
// the caller told so.
func (c *Core) Release(ctx context.Context, uid, sandboxID string) error {
	s, err := c.lockSlot(ctx, uid, false)
	if err != nil {
		return c.later(ctx, uid, sandboxID, "release", c.Release, err)
	}
	if s == nil {
		return nil
	}
	defer s.unlock()
	if !c.current(ctx, s, sandboxID, "release") {
		return nil
	}
	enrolled := s.enrolled != nil
	err = c.release(ctx, s, RemoveHostOnly, StateReleased, "stopped")
	if enrolled {
		// The status outlives the sandbox; a new sandbox of the pod is
		// decided afresh (another revision's meshlet may take it).
		c.report(s, RedirectionRemoved)
	}
	return err
}

// Forget releases the pod if needed and drops everything the core knows
// about it (the runtime removed the sandbox). As Release, it acts only on
// the pod's current sandbox, and does not keep a caller waiting past its
// deadline.
func (c *Core) Forget(ctx context.Context, uid, sandboxID string) error {
	s, err := c.lockSlot(ctx, uid, false)
	if err != nil {
		return c.later(ctx, uid, sandboxID, "forget", c.Forget, err)
	}
	if s == nil {
		return nil
	}
	defer s.unlock()
	if !c.current(ctx, s, sandboxID, "forget") {
		return nil
	}
	return c.forget(ctx, s)
}

// current reports whether an event about sandboxID is about the pod's
// current sandbox (the one the last event that started or listed the pod
// named). The slot is locked.
func (c *Core) current(ctx context.Context, s *slot, sandboxID, what string) bool {
	if SameSandbox(s.pod.SandboxID, sandboxID) {
		return true
	}
	podDebug(ctx, &s.pod, "Ignoring an event for a replaced sandbox of the pod", "op", what, "sandbox", sandboxID, "current", s.pod.SandboxID)
	return false
}

// later runs op on the pod in the background, once the operation that
// holds it ends, for a caller whose deadline passed waiting for it
// (waitErr); the caller gets an error saying so.
func (c *Core) later(ctx context.Context, uid, sandboxID, what string, op func(context.Context, string, string) error, waitErr error) error {
	bg := context.WithoutCancel(ctx)
	go func() {
		if err := op(bg, uid, sandboxID); err != nil {
			klog.FromContext(bg).Error(err, "Deferred operation on a pod failed", "op", what, "podUID", uid, "sandbox", sandboxID)
		}
	}()
	return fmt.Errorf("%s pod %s deferred until the operation running on it ends: %w", what, uid, waitErr)
}

// ForgetUnchanged forgets the pod as Forget does, but only while it is as
// st (from Pods) saw it: same state since the same time. A caller that
// decided from an older look (a listing of the runtime that missed the
// pod) must not drop what changed since, such as a new sandbox of the same
// pod enrolled meanwhile. It reports whether it forgot the pod.
func (c *Core) ForgetUnchanged(ctx context.Context, st PodStatus) (bool, error) {
	s, err := c.lockSlot(ctx, st.UID, false)
	if err != nil || s == nil {
		return false, err
	}
	defer s.unlock()
	if s.state != st.State || !s.since.Equal(st.Since) {
		return false, nil
	}
	return true, c.forget(ctx, s)
}

// forget releases the pod in s (locked) and drops its slot.
func (c *Core) forget(ctx context.Context, s *slot) error {
	uid := s.pod.UID
	err := c.release(ctx, s, RemoveHostOnly, StateReleased, "removed")
	// The view entry goes while the map lock is held: once it is released
	// a new slot for the same UID may be created and published, and must
	// not be unpublished by this Forget.
	c.mu.Lock()
	delete(c.slots, uid)
	s.gone = true
	c.viewMu.Lock()
	delete(c.view, uid)
	c.viewMu.Unlock()
	c.mu.Unlock()
	return err
}

// Reconcile converges to exactly the given set of running pods: each is
// enrolled or not as policy says, and every pod the core knows that is not
// in the set is forgotten. The pods already run, so a missing ztunnel
// defers their handover to its next connection instead of failing them.
// Errors are collected per pod; one failing pod does not stop the others.
//
// late are the pods it enrolled that no agent held in their sandbox
// before (see Holds): they started while nothing enrolled them.
//
// pods should hold the sandbox that runs of each pod: a runtime that lists
// a pod's stopped sandboxes too is the adapter's to sort out. Given
// several of one pod anyway, Reconcile keeps the one the pod is in now, or
// else the last listed.
func (c *Core) Reconcile(ctx context.Context, pods []Pod) (late []Pod, err error) {
	pods = c.oneSandboxEach(ctx, pods)
	running := make(map[string]struct{}, len(pods))
	held := make([]bool, len(pods))
	for i, p := range pods {
		running[p.UID] = struct{}{}
		held[i] = c.Holds(p.UID, p.SandboxID)
	}
	var stale []string
	c.mu.RLock()
	for uid := range c.slots {
		if _, ok := running[uid]; !ok {
			stale = append(stale, uid)
		}
	}
	c.mu.RUnlock()

	errs := c.parallel(len(stale), func(i int) error { return c.Forget(ctx, stale[i], "") })
	errs = append(errs, c.parallel(len(pods), func(i int) error {
		if pods[i].UID == "" {
			return errors.New("reconcile: pod without UID")
		}
		_, err := c.enroll(ctx, pods[i], HandoverDeferred)
		return err
	})...)
	// Every running pod has been seen: a checkpointed record still
	// unmatched belongs to a pod removed while no agent ran. The proxy,
	// which the previous agent had handed it, drops it; dropping the
	// records changes what the checkpoint should say.
	c.mu.Lock()
	gone := make([]string, 0, len(c.checkpointed))
	for uid := range c.checkpointed {
		gone = append(gone, uid)
	}
	clear(c.checkpointed)
	c.mu.Unlock()
	if len(gone) > 0 {
		c.viewMu.Lock()
		c.generation++
		c.viewMu.Unlock()
		errs = append(errs, c.parallel(len(gone), func(i int) error {
			if err := c.ports.Proxy.ForgetInherited(ctx, gone[i]); err != nil {
				return fmt.Errorf("ztunnel del of pod %s, removed while no agent ran: %w", gone[i], err)
			}
			return nil
		})...)
	}
	c.listedOnce.Do(func() { close(c.listed) })
	for i, p := range pods {
		if st, ok := c.Status(p.UID); ok && !held[i] && st.State == StateEnrolled && SameSandbox(st.SandboxID, p.SandboxID) {
			late = append(late, p)
		}
	}
	return late, errors.Join(errs...)
}

// oneSandboxEach returns pods with one sandbox per pod: of several, the
// pod's current sandbox if listed, else the last.
func (c *Core) oneSandboxEach(ctx context.Context, pods []Pod) []Pod {
	at := make(map[string]int, len(pods))
	out := make([]Pod, 0, len(pods))
	for _, p := range pods {
		j, dup := at[p.UID]
		if !dup {
			at[p.UID] = len(out)
			out = append(out, p)
			continue
		}
		keep, drop := p, out[j]
		if cur := c.CurrentSandbox(p.UID); cur != "" && cur == drop.SandboxID {
			keep, drop = drop, p
		}
		out[j] = keep
		klog.FromContext(ctx).Info("The runtime listed several sandboxes of one pod: keeping one", "pod", klog.KRef(p.Namespace, p.Name),
			"podUID", p.UID, "sandbox", keep.SandboxID, "ignored", drop.SandboxID)
	}
	return out
}

// UnmeshAll takes every enrolled pod out of the mesh, its in-pod rules
// removed: meshlet is being uninstalled and was asked to leave no pod
// redirected to a ztunnel that may be going too.
func (c *Core) UnmeshAll(ctx context.Context) error {
	return c.eachPod(ctx, func(s *slot) error {
		return c.release(ctx, s, RemoveAll, StateReleased, "meshlet uninstalled")
	})
}

// EachEnrolled calls fn on every enrolled pod, in parallel, each with its
// enrollment held still (no other operation on the pod runs meanwhile): a
// stopping agent rewrites what it leaves in the pods. fn must not keep w.
func (c *Core) EachEnrolled(ctx context.Context, fn func(ctx context.Context, w *Workload) error) error {
	return c.eachPod(ctx, func(s *slot) error {
		if s.enrolled == nil {
			return nil
		}
		if err := fn(ctx, s.enrolled); err != nil {
			return fmt.Errorf("pod %s: %w", s.enrolled.UID, err)
		}
		return nil
	})
}

// Reevaluate re-decides every running pod the core knows (policy inputs
// such as namespace labels changed): pods that now qualify are enrolled,
// pods that no longer do are released with their in-pod rules removed.
func (c *Core) Reevaluate(ctx context.Context) error {
	return c.eachPod(ctx, func(s *slot) error {
		if s.state == StateReleased || s.state == StateReleasing {
			return nil // stopped pods stay stopped
		}
		_, err := c.converge(ctx, s, HandoverDeferred)
		c.noted(ctx, s, HandoverDeferred, err)
		return err
	})
}

// eachPod runs fn, in parallel, on every pod the core knows, each with its
// slot locked; pods gone meanwhile are skipped.
func (c *Core) eachPod(ctx context.Context, fn func(s *slot) error) error {
	c.mu.RLock()
	uids := make([]string, 0, len(c.slots))
	for uid := range c.slots {
		uids = append(uids, uid)
	}
	c.mu.RUnlock()
	errs := c.parallel(len(uids), func(i int) error {
		s, err := c.lockSlot(ctx, uids[i], false)
		if err != nil || s == nil {
			return err
		}
		defer s.unlock()
		return fn(s)
	})
	return errors.Join(errs...)
}
