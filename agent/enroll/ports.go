package enroll

import (
	"context"
	"net/netip"
)

// The ports below are declared where they are consumed. Adapters implement
// them; tests use small fakes.

// PodInfoResolver finds what the sandbox does not carry: the service account
// and the namespace's labels. It must return within ctx's deadline; when its
// source is unavailable it degrades (last known labels) rather than hang.
type PodInfoResolver interface {
	Resolve(ctx context.Context, pod *Pod) (PodInfo, error)
}

// Policy decides whether a pod is enrolled. It must be pure: the same pod
// and info always give the same decision.
type Policy interface {
	Decide(pod *Pod, info PodInfo) Decision
}

// SettingsSource is one origin of per-pod settings (today the pod's
// annotations; a ResourceClaim's parameters would be another). Every source
// goes through this one port; the core consults Ports.Settings in order,
// highest precedence first, and a setting no source gives takes the node's
// default (Config.Defaults). The precedence is: a claim's settings, then
// the pod's annotations, then the node's defaults.
type SettingsSource interface {
	// PodSettings returns what this source says about the pod. Warnings
	// name settings of the pod's own that the source could not use (an
	// unparsable annotation); the core logs them. It must be pure and
	// must not block: it runs inside the runtime's hook.
	PodSettings(pod *Pod, info PodInfo) (SettingsOverride, []string)
}

// Netns is an open network namespace.
type Netns interface {
	// Inode identifies the namespace among those that exist: the kernel
	// gives a freed namespace's inode to a later one.
	Inode() uint64
	// Cookie identifies the namespace for the whole boot: no other
	// namespace gets it (SO_NETNS_COOKIE). It may enter the namespace to
	// read it once.
	Cookie() (uint64, error)
	// WithFd calls fn with the namespace's file descriptor, which stays
	// open until fn returns; after Close it fails without calling fn.
	WithFd(fn func(fd int) error) error
	// HoldsAddrs fails unless every address is assigned to an interface
	// in the namespace.
	HoldsAddrs(ips []netip.Addr) error
	// PodAddrs returns the settled global unicast addresses the pod's
	// eth0 holds: its IPs, where its source gave none.
	PodAddrs() ([]netip.Addr, error)
	Close() error
}

// NetnsOpener opens a pod's network namespace by path.
type NetnsOpener interface {
	Open(path string) (Netns, error)
}

// RemoveScope says how much of a pod's redirection to remove.
type RemoveScope int

const (
	// RemoveHostOnly removes node-side state only. Used when the pod's
	// netns is going away: release never needs to enter it (on CRI-O it is
	// already gone when the stop event arrives).
	RemoveHostOnly RemoveScope = iota
	// RemoveAll also removes the rules inside the pod's netns: the pod
	// keeps running, unmeshed (opt-out, rollback).
	RemoveAll
)

// Redirector programs traffic redirection for a pod.
type Redirector interface {
	// Apply installs the pod's redirection and returns its account of
	// what it installed (kept as the record's Redirection).
	//
	// prior, when not nil, is the record of the rules already in the pod's
	// network namespace: a previous agent's, checkpointed with the same
	// addresses and settings (or, for a pod Apply would refuse now, with
	// the settings the core then gives the pod), or this agent's (only the
	// pod's identity changed, or its settings: a re-program). Apply may
	// keep those rules if prior's Redirection is what it would install now
	// and the rules are still there; otherwise it replaces them in place,
	// never leaving the pod without rules. A pod it would refuse now it
	// adopts as prior says.
	//
	// A failed Apply without prior leaves nothing of itself; with prior it
	// leaves the pod with prior's rules (where it can write prior's plan;
	// of a plan it does not write, another rules version, what the failed
	// write left).
	Apply(ctx context.Context, w *Workload, prior *Record) (string, error)
	// Account returns what Apply would return for a pod with r's
	// addresses and settings now, touching nothing. An enrolled pod whose
	// record's Redirection differs is re-programmed when Reevaluate
	// converges it: a node-wide setting of the redirector (IPv6) changed.
	// An error says Apply would refuse such a pod now (without a prior
	// record): an enrolled one keeps its enrollment.
	Account(r *Record) (string, error)
	// Remove undoes Apply within scope. It must tolerate state that is
	// already gone.
	Remove(ctx context.Context, w *Workload, scope RemoveScope) error
}

// Handover says what AddWorkload does when no proxy is connected.
type Handover int

const (
	// HandoverNow fails when no proxy is connected: a pod that is starting
	// must not run as if it were meshed while nothing proxies it.
	HandoverNow Handover = iota
	// HandoverDeferred hands the workload over without waiting for the
	// proxy: registered, then sent in the background, or with the next
	// proxy connection's snapshot when none is connected; a refusal is
	// retried until the proxy takes it. For pods that already run (agent
	// restart, late enrollment, label changes), where failing would only
	// take a running pod out of the mesh, and where waiting for one round
	// trip per pod would hold up the runtime's Synchronize.
	HandoverDeferred
)

// ProxyLink hands workloads to the node proxy (ztunnel).
type ProxyLink interface {
	// AddWorkload returns once the proxy acknowledged the workload (with
	// HandoverDeferred, once it is registered: see there); any error
	// means the proxy does not have it.
	AddWorkload(ctx context.Context, w *Workload, h Handover) error
	// DelWorkload tells the proxy to drop the workload.
	DelWorkload(ctx context.Context, uid string) error
	// ForgetInherited says a previous agent's handover of the pod is over
	// (the pod is gone, or this agent lets it go): unless this agent has
	// handed the pod over itself since, the proxy drops it.
	ForgetInherited(ctx context.Context, uid string) error
}

// RedirectionStatus is what the pod's status annotation should say.
type RedirectionStatus int

const (
	// RedirectionPending: rules in place, proxy has not acked yet.
	RedirectionPending RedirectionStatus = iota
	// RedirectionEnabled: the pod's traffic goes through the proxy.
	RedirectionEnabled
	// RedirectionRemoved: the pod left the mesh while running.
	RedirectionRemoved
)

// String is the status's name in logs and, for pending and enabled, the
// value of the pod's redirection annotation that istiod reads: the names
// are part of that contract and must not change.
func (s RedirectionStatus) String() string {
	switch s {
	case RedirectionPending:
		return "pending"
	case RedirectionEnabled:
		return "enabled"
	case RedirectionRemoved:
		return "removed"
	}
	return "unknown"
}

// PodRef names a pod for status reporting.
type PodRef struct {
	UID       string
	Name      string
	Namespace string
}

// StatusReporter publishes a pod's redirection status. Report must not
// block: implementations queue and apply asynchronously, off the runtime
// hook's critical path.
type StatusReporter interface {
	Report(pod PodRef, status RedirectionStatus)
}
