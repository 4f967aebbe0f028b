package enroll

import "net/netip"

// Listed is closed once the first Reconcile has ended: the core has seen
// every pod the runtime runs, and knows which of the previous agent's
// pods are gone.
func (c *Core) Listed() <-chan struct{} { return c.listed }

// Status returns the state of one pod. It never waits for an operation
// on the pod: it reads the state last published.
func (c *Core) Status(uid string) (PodStatus, bool) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	v, ok := c.view[uid]
	return v.status, ok
}

// Pods returns the state of every pod the core knows, in no order, as
// last published.
func (c *Core) Pods() []PodStatus {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	out := make([]PodStatus, 0, len(c.view))
	for _, v := range c.view {
		out = append(out, v.status)
	}
	return out
}

// Records returns the record of every enrolled pod, in no order, and the
// generation of that set: it is the same exactly when no record was
// added, replaced or removed since. Records share their IPs slices with
// the core: do not modify them.
func (c *Core) Records() ([]Record, uint64) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	out := make([]Record, 0, len(c.view))
	for _, v := range c.view {
		if v.record != nil {
			out = append(out, *v.record)
		}
	}
	return out, c.generation
}

// Record returns the record of one enrolled pod. Its IPs slice is shared
// with the core: do not modify it.
func (c *Core) Record(uid string) (Record, bool) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	if v := c.view[uid]; v.record != nil {
		return *v.record, true
	}
	return Record{}, false
}

// RecordInNetns returns the record of the enrolled pod in the network
// namespace with the given inode. Its IPs slice is shared with the core:
// do not modify it.
func (c *Core) RecordInNetns(inode uint64) (Record, bool) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	for _, v := range c.view {
		if v.record != nil && v.record.NetnsInode == inode {
			return *v.record, true
		}
	}
	return Record{}, false
}

// Holds reports whether the pod is enrolled in sandbox sandboxID ("" and
// a record without one match any): by this agent, or by the previous one,
// whose checkpointed record no pod has claimed yet. A running pod it holds
// was enrolled when it started; enrolling it now is an adoption, not a
// late enrollment.
func (c *Core) Holds(uid, sandboxID string) bool {
	if st, ok := c.Status(uid); ok && st.State == StateEnrolled && SameSandbox(st.SandboxID, sandboxID) {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.checkpointed[uid]
	return r != nil && SameSandbox(r.SandboxID, sandboxID)
}

// CurrentSandbox is the sandbox the core has the pod in: the one its
// state names, else the one the previous agent's unclaimed record names
// (right after a restart); "" if neither names one.
func (c *Core) CurrentSandbox(uid string) string {
	if st, ok := c.Status(uid); ok && st.SandboxID != "" {
		return st.SandboxID
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if r := c.checkpointed[uid]; r != nil {
		return r.SandboxID
	}
	return ""
}

// Generation moves whenever what a checkpoint should hold changed: a record
// was added, replaced or removed, or the first Reconcile dropped the
// checkpointed records of pods that are gone. It starts at 0.
func (c *Core) Generation() uint64 {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	return c.generation
}

// EnrolledIPs returns the addresses of every enrolled pod.
func (c *Core) EnrolledIPs() []netip.Addr {
	records, _ := c.Records()
	var ips []netip.Addr
	for _, r := range records {
		ips = append(ips, r.IPs...)
	}
	return ips
}

// publish makes s's current state what readers see. The slot is locked.
func (c *Core) publish(s *slot) {
	v := podView{status: s.status()}
	if s.enrolled != nil {
		v.record = &s.enrolled.Record
	}
	c.viewMu.Lock()
	if c.view[s.pod.UID].record != v.record {
		c.generation++
	}
	c.view[s.pod.UID] = v
	c.viewMu.Unlock()
}

func (s *slot) status() PodStatus {
	st := PodStatus{UID: s.pod.UID, SandboxID: s.pod.SandboxID, Name: s.pod.Name, Namespace: s.pod.Namespace,
		State: s.state, Reason: s.reason, Since: s.since,
		Retries: s.retry.attempts, RetryAt: s.retry.at, LastError: s.retry.lastErr}
	if s.enrolled != nil {
		st.NetnsInode = s.enrolled.NetnsInode
	}
	return st
}
