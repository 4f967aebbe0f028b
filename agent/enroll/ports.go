package enroll

import "context"

// The ports below are declared where they are consumed. Adapters implement
// them; tests use small fakes.

// PodInfoResolver finds what the sandbox does not carry: the service account
// and the namespace's labels. It must return within ctx's deadline; when its
// source is unavailable it degrades (last known labels) rather than hang.
type PodInfoResolver interface {
	Resolve(ctx context.Context, pod *Pod) (PodInfo, error)
}

// Policy decides whether and how a pod is enrolled. It must be pure: the
// same pod and info always give the same decision.
type Policy interface {
	Decide(pod *Pod, info PodInfo) Decision
}

// Netns is an open network namespace.
type Netns interface {
	Fd() uintptr
	Inode() uint64
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
	// Apply installs the pod's redirection, all or nothing.
	Apply(ctx context.Context, w *Workload) error
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
	// HandoverDeferred registers the workload for the next proxy
	// connection's snapshot when none is connected: for pods that already
	// run (agent restart, late enrollment, label changes), where failing
	// would change nothing.
	HandoverDeferred
)

// ProxyLink hands workloads to the node proxy (ztunnel).
type ProxyLink interface {
	// AddWorkload returns once the proxy acknowledged the workload (or,
	// with HandoverDeferred and no proxy connected, once it is registered
	// for the next connection); any error means the proxy does not have it.
	AddWorkload(ctx context.Context, w *Workload, h Handover) error
	// DelWorkload tells the proxy to drop the workload.
	DelWorkload(ctx context.Context, uid string) error
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
