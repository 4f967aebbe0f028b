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
	UID string
	// SandboxID is the runtime's ID of the pod's sandbox (CNI: the
	// container ID). A pod keeps its UID while the kubelet replaces its
	// sandbox; the ID tells the sandboxes apart, and the runtime never
	// gives it to another. Empty: unknown (any sandbox of the pod).
	SandboxID      string
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
// the API server in a cluster, defaults in standalone mode; and, in Held,
// what the core itself holds of it.
type PodInfo struct {
	ServiceAccount  string
	NamespaceLabels map[string]string
	// PodLabels and PodAnnotations are the pod's current metadata from the
	// API server. They win over the sandbox's (fixed when it was created)
	// so that label changes on a running pod take effect. Nil: unknown.
	PodLabels      map[string]string
	PodAnnotations map[string]string
	// ResourceClaims names the pod's ResourceClaims (in its namespace), as
	// the API server's pod lists them; empty when it has none or the API
	// server could not say.
	ResourceClaims []string
	// HostNetwork is the pod spec's hostNetwork as the API server has it;
	// nil: unknown (no API server, or it could not say).
	HostNetwork *bool
	// Held is set by the core, not the resolver: this agent has the pod
	// in the mesh, or its previous run had (the checkpoint holds it), so
	// a decision about it is about keeping it.
	Held bool
	// Unknown says the source could not say (the API server unreachable,
	// or the pod not in it yet): the labels are the sandbox's and the
	// namespace's last known, the service account a default. A decision
	// on such information never takes a held pod out of the mesh; the
	// resolver has the pod decided again once it knows.
	Unknown bool
}

// Metadata returns the pod's current labels and annotations: the API
// server's where known, else the sandbox's.
func (i *PodInfo) Metadata(pod *Pod) (labels, annotations map[string]string) {
	labels, annotations = pod.Labels, pod.Annotations
	if i.PodLabels != nil {
		labels = i.PodLabels
	}
	if i.PodAnnotations != nil {
		annotations = i.PodAnnotations
	}
	return labels, annotations
}

// Settings are a pod's own mesh settings: what its in-pod rules capture.
// Node-wide settings (rule backend, IPv6) belong to the redirector.
type Settings struct {
	// DNSCapture redirects the pod's DNS queries to ztunnel's DNS proxy.
	DNSCapture bool `json:"dnsCapture"`
	// BypassInbound leaves inbound traffic alone (Istio's "ingress mode").
	BypassInbound bool `json:"bypassInbound"`
}

// SettingsOverride is one source's say on a pod's settings. A nil field
// leaves that setting to the next source in precedence order, and in the
// end to the node's defaults.
type SettingsOverride struct {
	DNSCapture    *bool
	BypassInbound *bool
}

// over applies o's fields that are set and that no source of higher
// precedence set (taken records which ones that is).
func (o SettingsOverride) over(s *Settings, taken *SettingsOverride) {
	if o.DNSCapture != nil && taken.DNSCapture == nil {
		s.DNSCapture, taken.DNSCapture = *o.DNSCapture, o.DNSCapture
	}
	if o.BypassInbound != nil && taken.BypassInbound == nil {
		s.BypassInbound, taken.BypassInbound = *o.BypassInbound, o.BypassInbound
	}
}

// ReasonKeptUnknown is the decision's reason for a meshed pod kept in the
// mesh because its source could not say whether it still is
// (PodInfo.Unknown).
const ReasonKeptUnknown = "kept-source-unknown"

// Decision is policy's verdict for one pod.
type Decision struct {
	Enroll bool
	// Reason is short and stable ("pod-label", "host-network", ...): it
	// appears in logs, status and metric labels.
	Reason string
	// OtherAgent, with Enroll false: the pod is another agent's to mesh
	// (another revision's meshlet), so whatever redirection is in it is
	// that agent's and stays. Otherwise a running pod found skipped at
	// start-up is cleared of leftover rules.
	OtherAgent bool
}

// Record is one enrolled pod's facts, as the core enrolled it: who the pod
// is, which network namespace, which addresses, which settings, and what
// the redirector installed. It is the one description of an enrollment:
// the ports receive it (inside a Workload), the checkpoint persists it
// as is, and a restarted agent's redirector adopts running pods from it.
// A Record is never modified once the core published it.
type Record struct {
	UID            string `json:"uid"`
	Name           string `json:"name"`
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"serviceAccount"`
	// SandboxID is the sandbox the pod was enrolled in (Pod.SandboxID).
	SandboxID  string `json:"sandboxID,omitempty"`
	NetnsInode uint64 `json:"netnsInode"`
	// NetnsCookie is the namespace's cookie (Netns.Cookie), which no
	// other namespace gets in the same boot, where its inode is reused
	// once it is freed; 0: not known (written by an older meshlet, or a
	// kernel without cookies).
	NetnsCookie uint64       `json:"netnsCookie,omitempty"`
	IPs         []netip.Addr `json:"ips"`
	Settings    Settings     `json:"settings"`
	// Redirection is the redirector's own account of the rules it
	// installed (backend, families, captures). The core does not read it;
	// it is what lets a restarted agent keep rules that match what it
	// would install now.
	Redirection string `json:"redirection"`
}

// sameEnrollment reports whether enrolling o would change nothing for r:
// same network namespace, identity, addresses and settings. Redirection is
// the redirector's output, not an input, and is not compared.
func (r *Record) sameEnrollment(o *Record) bool {
	return r.sameRules(o) && r.Name == o.Name && r.Namespace == o.Namespace &&
		r.ServiceAccount == o.ServiceAccount
}

// sameIdentity reports whether the proxy sees r and o as the same
// workload: the same pod, in the same network namespace, with the same
// name and service account.
func (r *Record) sameIdentity(o *Record) bool {
	return r.UID == o.UID && r.sameNetns(o) && r.Name == o.Name && r.Namespace == o.Namespace &&
		r.ServiceAccount == o.ServiceAccount
}

// sameNetns reports whether r and o may name the same sandbox's network
// namespace: same inode, and no sandbox ID or cookie that tells them
// apart (one that is not known tells nothing).
func (r *Record) sameNetns(o *Record) bool {
	return r.NetnsInode == o.NetnsInode && SameSandbox(r.SandboxID, o.SandboxID) &&
		(r.NetnsCookie == 0 || o.NetnsCookie == 0 || r.NetnsCookie == o.NetnsCookie)
}

// provenSame reports whether r, a record from before, is known to name
// the sandbox and network namespace of o: both carry the sandbox ID and
// they are equal, same inode, and a cookie r recorded is o's. Less than
// that (a record an older meshlet wrote) may still be the same, but is
// not taken on trust.
func (r *Record) provenSame(o *Record) bool {
	return r.SandboxID != "" && r.SandboxID == o.SandboxID && r.NetnsInode == o.NetnsInode &&
		(r.NetnsCookie == 0 || r.NetnsCookie == o.NetnsCookie)
}

// SameSandbox reports whether two sandbox IDs may name the same sandbox:
// equal, or one of them not known.
func SameSandbox(a, b string) bool { return a == "" || b == "" || a == b }

// sameRules reports whether r and o need the same in-pod rules: same
// network namespace, addresses and settings (identity does not matter to
// the rules).
func (r *Record) sameRules(o *Record) bool {
	return r.sameAddrs(o) && r.Settings == o.Settings
}

// sameAddrs reports whether r and o are the same pod in the same network
// namespace with the same addresses.
func (r *Record) sameAddrs(o *Record) bool {
	return r.UID == o.UID && r.sameNetns(o) && slices.Equal(r.IPs, o.IPs)
}

// Workload is an enrolled pod as the ports see it: its record and its
// network namespace, held open by the core for as long as it is enrolled.
type Workload struct {
	Record
	Netns Netns
	// Running: the pod ran before this enrollment (found by a listing of
	// the runtime's pods, or converged again), so rules of the agent that
	// meshed it before, istio-cni, may be in its namespace.
	Running bool
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
	UID string
	// SandboxID is the sandbox the last event about the pod named.
	SandboxID  string
	Name       string
	Namespace  string
	State      State
	Reason     string
	NetnsInode uint64 // 0 unless enrolled
	Since      time.Time
	// Retries counts the failed convergences in a row of a running pod
	// (0: none pending); the core tries again at RetryAt. LastError is
	// the last failure. An enrolled pod keeps its enrollment meanwhile.
	Retries   int
	RetryAt   time.Time
	LastError string
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
