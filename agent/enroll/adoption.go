package enroll

import (
	"context"
	"fmt"
)

// cookie returns the namespace's cookie, or 0 where the kernel has none
// (before Linux 5.14): the record then names the namespace by its sandbox
// and inode, which is said once.
func (c *Core) cookie(ctx context.Context, pod *Pod, ns Netns) uint64 {
	cookie, err := ns.Cookie()
	if err != nil && !c.noCookies.Swap(true) {
		podLogger(ctx, pod).Info("Network namespace cookies cannot be read: records name a namespace by its sandbox and inode", "err", err)
	}
	return cookie
}

// dropInherited tells the proxy to drop a pod the previous agent had
// handed it and this one has not taken over (its checkpointed record), now
// that the pod leaves: it stopped, or is no longer selected. The slot is
// locked.
func (c *Core) dropInherited(ctx context.Context, s *slot) error {
	if s.checkpointed == nil {
		return nil
	}
	s.checkpointed = nil
	if err := c.ports.Proxy.ForgetInherited(ctx, s.pod.UID); err != nil {
		return fmt.Errorf("ztunnel del of pod %s, enrolled by the previous agent: %w", s.pod.UID, err)
	}
	return nil
}

// heldServiceAccount is the service account the pod was meshed with, by
// this agent or the previous one.
func (s *slot) heldServiceAccount() string {
	if s.enrolled != nil {
		return s.enrolled.ServiceAccount
	}
	return s.checkpointed.ServiceAccount
}

// provenAdoption reports whether the pod in s (locked) runs in the very
// sandbox and namespace the previous agent enrolled it in: its cookie, not
// only its inode, which a later namespace may reuse. Such a pod is adopted
// without the address check: failing it would leave that agent's rules in
// it with no ztunnel that knows it. The namespace's cookie, once read, is
// kept in rec.
func (c *Core) provenAdoption(ctx context.Context, s *slot, rec *Record, ns Netns) bool {
	cp := s.checkpointed
	if cp == nil || cp.SandboxID == "" || cp.NetnsInode != rec.NetnsInode {
		return false
	}
	rec.NetnsCookie = c.cookie(ctx, &s.pod, ns)
	return cp.provenSame(rec)
}

// inheritedRules is the previous agent's record of the pod in s (locked)
// when the redirector may keep the rules it names for want, else nil.
func (c *Core) inheritedRules(s *slot, want *Workload) *Record {
	cp := s.checkpointed
	switch {
	case cp == nil:
		return nil
	case cp.sameRules(&want.Record):
		return cp
	case cp.sameAddrs(&want.Record) && c.refused(&want.Record):
		// The redirector would refuse the pod with its settings now (only
		// IPv6 addresses, IPv6 off) and they changed while no agent ran:
		// adopted with the settings its rules were written with, as a
		// running meshlet keeps it.
		want.Settings = cp.Settings
		return cp
	}
	return nil
}
