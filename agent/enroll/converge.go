package enroll

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"
)

// converge makes the pod in s what policy wants. The slot is locked.
//
// For a starting pod (HandoverNow: a runtime hook) the caller's deadline
// bounds the whole enrollment, not only the steps that wait: it is checked
// before every step that changes something, so the hook fails in its own
// time, with the step it did not reach, and never runs into the runtime's
// timeout (which would start the pod unmeshed). A pod that already runs
// (Reconcile, Reevaluate) is not cut short between steps: failing it early
// would only leave a previous agent's rules in it without a ztunnel that
// knows it; its waits are still bounded by the deadline.
func (c *Core) converge(ctx context.Context, s *slot, h Handover) (Result, error) {
	pod := &s.pod

	info, err := c.ports.Resolver.Resolve(ctx, pod)
	if err != nil {
		return c.fail(ctx, s, StepResolve, err)
	}
	info.Held = s.enrolled != nil || s.checkpointed != nil
	d := c.ports.Policy.Decide(pod, info)
	if !d.Enroll && info.Unknown && info.Held {
		// Decided without the API server (a restart while it is down):
		// the pod stays as this agent, or the previous one, meshed it,
		// with the service account it had, until the source knows.
		podLogger(ctx, pod).Info("Keeping a meshed pod in the mesh: its source could not say whether it still is", "wouldBe", d.Reason)
		d = Decision{Enroll: true, Reason: ReasonKeptUnknown}
		info.ServiceAccount = s.heldServiceAccount()
	}
	if !d.Enroll {
		return c.skip(ctx, s, h, d)
	}
	settings := c.settings(ctx, pod, info)
	if pod.NetnsPath == "" {
		return c.fail(ctx, s, StepNetns, ErrNoNetns)
	}
	ns, err := c.ports.Opener.Open(pod.NetnsPath)
	if errors.Is(err, ErrNodeNetns) && !pod.HostNetwork && (info.HostNetwork == nil || *info.HostNetwork) {
		// A host-network pod whose runtime reports the node's namespace
		// (CRI-O pins it, as it pins a pod's own) rather than none
		// (containerd): decided again, as what it is. Not a pod the API
		// server says has a network of its own: that one fails below.
		pod.HostNetwork = true
		if d = c.ports.Policy.Decide(pod, info); !d.Enroll {
			podDebug(ctx, pod, "Pod shares the node's network namespace: decided as a host-network pod", "netns", pod.NetnsPath, "reason", d.Reason)
			return c.skip(ctx, s, h, d)
		}
	}
	if err != nil {
		return c.fail(ctx, s, StepNetns, err)
	}
	res, err := c.convergeIn(ctx, s, h, d, info.ServiceAccount, settings, ns)
	if s.enrolled == nil || s.enrolled.Netns != ns {
		// Not the pod's enrollment (failed, or kept as it was): the one
		// cleanup of the namespace opened for this attempt.
		_ = ns.Close()
	}
	return res, err
}

// convergeIn enrolls the pod in s (locked) in ns, the network namespace
// its sandbox names, opened for this attempt: the caller closes it unless
// it ends up the enrollment's.
func (c *Core) convergeIn(ctx context.Context, s *slot, h Handover, d Decision, serviceAccount string, settings Settings, ns Netns) (Result, error) {
	pod := &s.pod
	old := s.enrolled
	ipsFromNetns := len(pod.IPs) == 0
	if ipsFromNetns {
		if err := c.podAddrs(ctx, s, ns); err != nil {
			return c.fail(ctx, s, StepNetns, err)
		}
	}
	rec := Record{UID: pod.UID, SandboxID: pod.SandboxID, Name: pod.Name, Namespace: pod.Namespace,
		ServiceAccount: serviceAccount, NetnsInode: ns.Inode(), IPs: pod.IPs, Settings: settings}

	// keepRules: only the pod's identity changed, and its rules stay as
	// they are (see keepEnrollment).
	keepRules := false
	if old != nil && old.NetnsInode == rec.NetnsInode {
		// The core has held this namespace open since it enrolled the
		// pod, so no other can have its inode: the same namespace.
		rec.NetnsCookie = old.NetnsCookie
		var keep bool
		if keep, keepRules = c.keepEnrollment(ctx, pod, old, &rec, h); keep {
			// The common case (Synchronize after a restart, the
			// CreateContainer gate, watchers): nothing allocated, nothing
			// changed, and the redirector would install the same rules.
			if s.reason != d.Reason {
				// Decided again for another reason (the source now knows
				// the pod it could not say about).
				c.setState(s, StateEnrolled, d.Reason)
			}
			return Result{Enrolled: true, Reason: d.Reason}, nil
		}
	}
	// A namespace without the pod's IPs is not the pod's (a runtime or
	// CNI fault): rules there would capture some other traffic, and
	// ztunnel would serve the pod's identity on the wrong addresses.
	if ipsFromNetns || c.provenAdoption(ctx, s, &rec, ns) {
		// Read from this namespace: it holds them; or adopted unchecked.
	} else if err := ns.HoldsAddrs(pod.IPs); err != nil {
		return c.fail(ctx, s, StepNetns, err)
	}
	if rec.NetnsCookie == 0 {
		// Read with the addresses above, most often: no extra step.
		rec.NetnsCookie = c.cookie(ctx, pod, ns)
	}
	if err := outOfTime(ctx, h); err != nil {
		return c.fail(ctx, s, StepRedirect, err)
	}
	want := &Workload{Record: rec, Netns: ns, Running: h == HandoverDeferred}
	// reprogrammed: the pod's rules change while the proxy's workload
	// stays the same. The redirector rewrites them in place (no moment
	// without rules), and a rewrite that fails leaves the pod as it was:
	// enrolled, its old rules in, the proxy serving it.
	reprogrammed := false
	if old != nil {
		podDebug(ctx, pod, "Pod changed, re-enrolling", "oldNetnsInode", old.NetnsInode, "netnsInode", want.NetnsInode)
		if !keepRules && old.sameIdentity(&want.Record) {
			// Same netns, same identity, new settings: the proxy keeps
			// the pod (the Add below, in the same netns, is a no-op for
			// ztunnel, where a Del would drain the pod and reset its
			// connections).
			reprogrammed = true
		} else {
			// A new netns means a new sandbox: the old one is going away,
			// so only node-side state is removed. A new identity in the
			// same netns: the proxy must drop the old workload (ztunnel
			// takes an Add in a netns it has as a no-op), and the rules
			// come out first unless they stay as they are.
			scope := RemoveHostOnly
			if old.NetnsInode == want.NetnsInode && !keepRules {
				scope = RemoveAll
			}
			if err := c.release(ctx, s, scope, StateReleased, "replaced"); err != nil {
				podLogger(ctx, pod).Error(err, "Releasing the previous enrollment reported an error; continuing")
			}
		}
	}
	if err := outOfTime(ctx, h); err != nil {
		return c.fail(ctx, s, StepRedirect, err)
	}

	if !reprogrammed {
		c.setState(s, StatePending, d.Reason)
	}
	var prior *Record
	if keepRules || reprogrammed {
		prior = &old.Record
	} else {
		prior = c.inheritedRules(s, want)
	}
	redirection, err := c.ports.Redirector.Apply(ctx, want, prior)
	if err != nil {
		// A failed Apply leaves the pod as prior had it: a re-programmed
		// pod stays enrolled as it was, a previous agent's keeps that
		// agent's rules and handover (its next attempt, a retry for a
		// running pod, adopts it again; its release drops it), and a new
		// one has nothing of the attempt. A pod whose identity changed
		// was released from the proxy above: rules no proxy serves would
		// blackhole its traffic, so they go.
		if keepRules {
			if rerr := c.ports.Redirector.Remove(context.WithoutCancel(ctx), want, RemoveAll); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove the rules of the released identity: %w", rerr))
			}
			c.report(s, RedirectionRemoved)
		}
		return c.fail(ctx, s, StepRedirect, err)
	}
	if reprogrammed {
		// The new rules are in; the proxy gets the pod's new workload.
		_ = old.Netns.Close()
		s.enrolled = nil
		c.setState(s, StatePending, d.Reason)
	}
	// One chance: from here the pod's rules are this agent's, and so is its
	// handover (AddWorkload replaces the previous agent's, or the rollback
	// below tells the proxy to drop the pod).
	inherited := s.checkpointed != nil
	s.checkpointed = nil
	want.Redirection = redirection
	if h == HandoverNow && !reprogrammed {
		// The pod waits on the proxy's answer. A deferred handover
		// returns at once: a running pod that reads enabled (this agent
		// meshed it, or the one it takes over from) must not read
		// pending to istiod on the way.
		c.report(s, RedirectionPending)
	}
	if reprogrammed {
		// The proxy has the pod in this netns: the Add is a no-op for it,
		// and a running pod is never taken out of the mesh for its answer
		// or the caller's deadline.
		err = c.ports.Proxy.AddWorkload(ctx, want, HandoverDeferred)
	} else if err = outOfTime(ctx, h); err == nil {
		err = c.ports.Proxy.AddWorkload(ctx, want, h)
	}
	if err != nil {
		// The caller's deadline may be what failed the add; the rollback
		// must run regardless.
		if rerr := c.ports.Redirector.Remove(context.WithoutCancel(ctx), want, RemoveAll); rerr != nil {
			err = errors.Join(err, fmt.Errorf("rollback redirection: %w", rerr))
		}
		if inherited {
			if ferr := c.ports.Proxy.ForgetInherited(ctx, pod.UID); ferr != nil {
				err = errors.Join(err, fmt.Errorf("ztunnel: %w", ferr))
			}
		}
		if !reprogrammed { // failReprogrammed reports it
			c.report(s, RedirectionRemoved)
		}
		return c.failReprogrammed(ctx, s, reprogrammed, StepProxy, err)
	}
	s.enrolled = want
	c.setState(s, StateEnrolled, d.Reason)
	c.report(s, RedirectionEnabled)
	podDebug(ctx, pod, "Pod enrolled", "reason", d.Reason, "netnsInode", want.NetnsInode, "adopted", prior != nil)
	return Result{Enrolled: true, Changed: true, Reason: d.Reason}, nil
}

// keepEnrollment reports whether an enrolled pod, converged again in the
// same network namespace as rec, stays as it is: nothing about it changed
// and the redirector would install the same rules now. A node-wide change
// of the rules (the redirector's account differs: IPv6 turned on or off)
// is made by Reevaluate, not inside a runtime's hook (HandoverNow), which
// must stay short.
//
// A pod the redirector would refuse now (only IPv6 addresses, IPv6 off)
// keeps its rules: a setting that cannot apply to a running pod never
// takes it out of the mesh (a new one is refused). If only its identity
// changed, it is handed to ztunnel again with its rules as they are
// (keepRules); if its settings or addresses changed, it stays as it is.
func (c *Core) keepEnrollment(ctx context.Context, pod *Pod, old *Workload, rec *Record, h Handover) (keep, keepRules bool) {
	account, err := c.ports.Redirector.Account(rec)
	switch {
	case err != nil && old.sameEnrollment(rec):
		podDebug(ctx, pod, "Pod keeps its enrollment: the node's settings would refuse it now", "redirection", old.Redirection, "err", err)
		return true, false
	case err != nil && old.sameRules(rec):
		return false, true
	case err != nil:
		podDebug(ctx, pod, "Pod keeps its enrollment as it is: its settings or addresses changed, and the node's settings would refuse it now",
			"redirection", old.Redirection, "err", err)
		return true, false
	case !old.sameEnrollment(rec):
		return false, false
	case account == old.Redirection:
		return true, false
	case h == HandoverNow:
		podDebug(ctx, pod, "Node settings change the pod's redirection: left to the re-evaluation", "redirection", old.Redirection, "want", account)
		return true, false
	}
	podDebug(ctx, pod, "Node settings changed the pod's redirection", "redirection", old.Redirection, "want", account)
	return false, false
}

// refused reports whether the redirector would refuse a pod with rec's
// addresses and settings now.
func (c *Core) refused(rec *Record) bool {
	_, err := c.ports.Redirector.Account(rec)
	return err != nil
}

// settings resolves the pod's settings: each field from the first source
// that sets it, else the node's default.
func (c *Core) settings(ctx context.Context, pod *Pod, info PodInfo) Settings {
	s := *c.defaults.Load()
	var taken SettingsOverride
	for _, src := range c.ports.Settings {
		o, warnings := src.PodSettings(pod, info)
		for _, w := range warnings {
			podLogger(ctx, pod).Info("Pod setting ignored", "warning", w)
		}
		o.over(&s, &taken)
	}
	return s
}

// outOfTime says why the caller's deadline leaves no room for the next
// step of a starting pod's enrollment, or nil while there is time (or the
// pod already runs: see converge).
func outOfTime(ctx context.Context, h Handover) error {
	if h != HandoverNow || ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrOutOfTime, context.Cause(ctx))
}

// clearLeftovers removes redirection a previous agent may have left in a
// running pod that policy no longer selects (its label changed while
// meshlet was down): rules without a ztunnel that knows the pod would
// blackhole its traffic. Only for pods adopted at start-up (Reconcile); a
// sandbox that is just starting cannot have any. Best effort, logged.
func (c *Core) clearLeftovers(ctx context.Context, pod *Pod) {
	if pod.NetnsPath == "" {
		return
	}
	ns, err := c.ports.Opener.Open(pod.NetnsPath)
	if err != nil {
		podDebug(ctx, pod, "Cannot check a skipped pod for leftover rules", "err", err)
		return
	}
	defer ns.Close()
	w := &Workload{Netns: ns, Record: Record{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace,
		NetnsInode: ns.Inode(), IPs: pod.IPs}}
	if err := c.ports.Redirector.Remove(context.WithoutCancel(ctx), w, RemoveAll); err != nil {
		podLogger(ctx, pod).Error(err, "Removing leftover redirection from a pod outside the mesh")
	}
}

// failReprogrammed is fail for a re-programmed pod whose new workload the
// proxy link could not take (its netns could not be passed on): its new
// rules are already rolled back, and the proxy, which still has the pod,
// drops it.
func (c *Core) failReprogrammed(ctx context.Context, s *slot, reprogrammed bool, step Step, err error) (Result, error) {
	if reprogrammed {
		if derr := c.ports.Proxy.DelWorkload(ctx, s.pod.UID); derr != nil {
			err = errors.Join(err, fmt.Errorf("ztunnel del: %w", derr))
		}
		c.report(s, RedirectionRemoved)
	}
	return c.fail(ctx, s, step, err)
}

// fail records a failed step. Any existing enrollment stays as it was (a
// failed re-resolve must not unmesh a running pod).
func (c *Core) fail(ctx context.Context, s *slot, step Step, err error) (Result, error) {
	e := &Error{UID: s.pod.UID, Step: step, Err: err}
	if s.enrolled == nil {
		c.setState(s, StateFailed, fmt.Sprintf("%s: %v", step, err))
	}
	podDebug(ctx, &s.pod, "Enrollment step failed", "step", step, "err", err)
	return Result{Enrolled: s.enrolled != nil}, e
}

// release tears down the pod's enrollment, if any, and records final. Every
// step runs even if an earlier one fails; errors are joined.
func (c *Core) release(ctx context.Context, s *slot, scope RemoveScope, final State, reason string) error {
	c.clearRetry(s)
	w := s.enrolled
	if w == nil {
		err := c.dropInherited(ctx, s)
		c.setState(s, final, reason)
		return err
	}
	c.setState(s, StateReleasing, reason)
	// Every step runs even when the caller's deadline passes: a ZDS Del
	// that cannot be sent in time goes out in the background, in its turn.
	var errs []error
	if err := c.ports.Proxy.DelWorkload(ctx, w.UID); err != nil {
		errs = append(errs, fmt.Errorf("ztunnel del: %w", err))
	}
	// Without the caller's deadline: rules left behind by a removal cut
	// short would blackhole the pod's traffic once the proxy drops it.
	if err := c.ports.Redirector.Remove(context.WithoutCancel(ctx), w, scope); err != nil {
		errs = append(errs, fmt.Errorf("remove redirection: %w", err))
	}
	if err := w.Netns.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close netns: %w", err))
	}
	s.enrolled = nil
	c.setState(s, final, reason)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release pod %s: %w", w.UID, err)
	}
	return nil
}

// skip records the pod as left out of the mesh (d), releasing what an
// earlier enrollment put in place. The slot is locked.
func (c *Core) skip(ctx context.Context, s *slot, h Handover, d Decision) (Result, error) {
	pod := &s.pod
	changed := s.state != StateSkipped || s.enrolled != nil
	var err error
	if s.enrolled != nil {
		podLogger(ctx, pod).Info("Pod no longer selected for the mesh, releasing", "reason", d.Reason)
		err = c.release(ctx, s, RemoveAll, StateSkipped, d.Reason)
		c.report(s, RedirectionRemoved)
	} else if (s.state == StateUnknown && h == HandoverDeferred || s.checkpointed != nil) && !d.OtherAgent {
		// Found running at start-up, or left as the previous agent meshed
		// it (its adoption failed): rules without a proxy that knows the
		// pod would blackhole its traffic.
		c.clearLeftovers(ctx, pod)
	}
	if derr := c.dropInherited(ctx, s); derr != nil {
		err = errors.Join(err, derr)
	}
	c.setState(s, StateSkipped, d.Reason)
	return Result{Reason: d.Reason, Changed: changed}, err
}

// podAddrs gives a pod whose source reported no IPs (containerd 1.7's NRI
// events carry none) the addresses its eth0 holds: those it was enrolled
// with (by this meshlet or, per the checkpoint, the previous one) while
// the namespace is the same, else read from it. The first time, the core
// says so. ns.Close is the caller's.
func (c *Core) podAddrs(ctx context.Context, s *slot, ns Netns) error {
	pod := &s.pod
	switch {
	case s.enrolled != nil && s.enrolled.NetnsInode == ns.Inode():
		pod.IPs = s.enrolled.IPs
		return nil
	case s.checkpointed != nil && s.checkpointed.NetnsInode == ns.Inode():
		pod.IPs = s.checkpointed.IPs
		return nil
	}
	if !c.addrsFromNetns.Swap(true) {
		klog.FromContext(ctx).Info("The pod source gives no pod IPs: reading each pod's addresses from eth0 in its network namespace")
	}
	ips, err := ns.PodAddrs()
	if err != nil {
		return err
	}
	if len(ips) == 0 {
		return fmt.Errorf("netns %s: %w", pod.NetnsPath, errNoAddrs)
	}
	pod.IPs = ips
	return nil
}
