package enroll

import (
	"net/netip"
	"slices"
	"time"
)

// Pod is what the core needs to know about a pod sandbox. Adapters fill it
// from their source (NRI PodSandbox, CNI args, the API server). The core
// keeps the value it is given: callers must not modify its maps afterwards.
type Pod struct {
	UID            string
	Name           string
	Namespace      string
	Labels         map[string]string
	Annotations    map[string]string
	RuntimeHandler string
	HostNetwork    bool
	// NetnsPath is the sandbox's network namespace (a bind mount or
	// /proc/<pid>/ns/net). Empty for host-network pods.
	NetnsPath string
	IPs       []netip.Addr
}

// DefaultServiceAccount is the service account of a pod that names none;
// it is also reported for a pod whose real one is not known (standalone,
// or the API server unreachable).
const DefaultServiceAccount = "default"

// PodInfo is what the core learns about a pod from outside its sandbox:
// the API server in a cluster, defaults in standalone mode.
type PodInfo struct {
	ServiceAccount  string
	NamespaceLabels map[string]string
	// PodLabels and PodAnnotations are the pod's current metadata from the
	// API server. They win over the sandbox's (fixed when it was created)
	// so that label changes on a running pod take effect. Nil: unknown.
	PodLabels      map[string]string
	PodAnnotations map[string]string
}

// Options are the per-pod redirection settings that policy derives.
type Options struct {
	// DNSCapture redirects the pod's DNS queries to ztunnel's DNS proxy.
	DNSCapture bool
	// BypassInbound leaves inbound traffic alone (Istio's "ingress mode").
	BypassInbound bool
	// IPv6 programs IPv6 rules too (when the pod has IPv6 addresses).
	IPv6 bool
}

// Decision is policy's verdict for one pod.
type Decision struct {
	Enroll bool
	// Reason is short and stable ("pod-label", "host-network", ...): it
	// appears in logs, status and metric labels.
	Reason  string
	Options Options
	// Warnings are about the pod's own settings (an unparsable annotation,
	// say) that policy worked around; the core logs them.
	Warnings []string
}

// Workload is an enrolled pod as the ports see it.
type Workload struct {
	UID            string
	Name           string
	Namespace      string
	ServiceAccount string
	IPs            []netip.Addr
	Options        Options
	// Netns is held open by the core for as long as the pod is enrolled.
	Netns Netns
}

// sameAs reports whether w already is what enrolling with these settings
// would produce (same namespace object, identity and options).
func (w *Workload) sameAs(o *Workload) bool {
	return w.Netns.Inode() == o.Netns.Inode() &&
		w.Name == o.Name && w.Namespace == o.Namespace &&
		w.ServiceAccount == o.ServiceAccount && w.Options == o.Options &&
		slices.Equal(w.IPs, o.IPs)
}

// State is where a pod is in its enrollment lifecycle.
type State int

const (
	// StateUnknown: the core has not decided anything for the pod yet.
	StateUnknown State = iota
	// StatePending: enrollment is in progress (rules going in, ztunnel not
	// yet acked).
	StatePending
	// StateEnrolled: rules in place, ztunnel acked, netns held.
	StateEnrolled
	// StateReleasing: teardown in progress.
	StateReleasing
	// StateReleased: the pod was enrolled and no longer is.
	StateReleased
	// StateSkipped: policy says the pod is not part of the mesh.
	StateSkipped
	// StateFailed: enrollment failed; Reason says at which step and why.
	StateFailed
)

var stateNames = [...]string{"unknown", "pending", "enrolled", "releasing", "released", "skipped", "failed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// PodStatus is a read-only view of one pod's state.
type PodStatus struct {
	UID        string
	Name       string
	Namespace  string
	State      State
	Reason     string
	NetnsInode uint64 // 0 unless enrolled
	Since      time.Time
}

// Result tells an adapter what Enroll did.
type Result struct {
	// Enrolled is true when the pod is in the mesh after the call.
	Enrolled bool
	// Changed is false when the call found the pod already as wanted.
	Changed bool
	// Reason is the policy reason for the decision.
	Reason string
}
