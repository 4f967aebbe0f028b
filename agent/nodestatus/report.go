// Package nodestatus is the report meshlet status prints and
// kubectl-meshlet reads from each node: a node's state as its meshlet sees
// it, and its pods. It holds types only, so that clients on any platform
// decode it.
package nodestatus

import (
	"time"

	"github.com/meshlet/meshlet/agent/nodesettings/live"
)

// Report is what meshlet status prints (-o json and -o yaml print it as
// is): the node's state as its running meshlet sees it, then its pods. It
// is also what kubectl-meshlet reads from each node.
type Report struct {
	// Status is READY, STANDBY or NOT READY: /readyz's answer (READY:
	// this meshlet serves the node and can enroll pods; STANDBY: another
	// meshlet serves it and this one takes over when it exits).
	Status string `json:"status"`
	// Detail is /readyz's detail, or why the node is not ready.
	Detail string `json:"detail"`
	// Healthy is meshlet status's exit status 0: the node is ready (or
	// this meshlet is a ready standby) and no mesh pod has failed.
	Healthy bool `json:"healthy"`
	// Problems say why Healthy is false, one line each.
	Problems []string `json:"problems,omitempty"`
	// Summary is the serving meshlet's account of the node (nil when no
	// meshlet serves it: Problems says why).
	Summary *Summary `json:"summary,omitempty"`
	// Pods are the node's pods as the serving meshlet sees them: failed
	// first, then enrolled, then the others; skipped pods only with --all.
	Pods []Pod `json:"pods"`
	// Settings are the node settings in effect, and where each
	// ConfigMap stands.
	Settings *live.Report `json:"settings,omitempty"`
}

// Status values of a Report.
const (
	StatusReady    = "READY"
	StatusStandby  = "STANDBY"
	StatusNotReady = "NOT READY"
)

// Summary is /debug/status: the serving meshlet's account of the node.
type Summary struct {
	Node    string `json:"node"`
	Version string `json:"version"`
	// Revision is the Istio revision this meshlet serves (--revision);
	// empty: every revision's pods. RevisionTags point to it.
	Revision     string   `json:"revision,omitempty"`
	RevisionTags []string `json:"revisionTags,omitempty"`
	// Ready and Detail are the serving meshlet's /readyz.
	Ready  bool   `json:"ready"`
	Detail string `json:"detail"`
	// Mesh is whether the node's mesh can take new pods (the runtime
	// hook is in place and a ztunnel is connected): what the node's
	// taints say.
	Mesh Mesh `json:"mesh"`
	// RuntimeHook is how pods reach meshlet and whether they do now.
	RuntimeHook RuntimeHook `json:"runtimeHook"`
	Ztunnel     Ztunnel     `json:"ztunnel"`
	API         API         `json:"api"`
	// DRA is the node's mesh device (nil: the DRA plugin is off).
	DRA *DRA `json:"dra,omitempty"`
	// NodeReadiness is the node's taint or condition (nil: off).
	NodeReadiness *NodeReadiness `json:"nodeReadiness,omitempty"`
	// RecentFailures are pods whose last enrollment in a runtime hook
	// failed, within FailureWindow: the runtime removed their sandboxes,
	// and the kubelet tries again.
	RecentFailures []Failure `json:"recentFailures,omitempty"`
	// PodCounts counts the node's pods by state (enrolled, failed,
	// pending, skipped, ...).
	PodCounts map[string]int `json:"podCounts"`
	// Started is when this meshlet started.
	Started time.Time `json:"started"`
}

// Mesh is whether the node's mesh can take new pods; Reason (a taint's
// value) and Message say why not.
type Mesh struct {
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// RuntimeHook is the pod source: Mode nri (the runtime's NRI hooks) or cni
// (the chained meshlet-cni), or "choosing (--mode auto)" until one is
// picked.
type RuntimeHook struct {
	Mode      string `json:"mode"`
	Connected bool   `json:"connected"`
	// Detail says why pods do not reach meshlet, when not Connected.
	Detail string `json:"detail,omitempty"`
}

// Ztunnel is the ZDS server.
type Ztunnel struct {
	Socket      string `json:"socket"`
	Connections int    `json:"connections"`
	// RefusedPods counts running pods whose Add ztunnel refused.
	RefusedPods int `json:"refusedPods,omitempty"`
}

// API is the API server's side: off in standalone mode.
type API struct {
	Enabled bool `json:"enabled"`
	Synced  bool `json:"synced"`
	// Error is why it is not synced.
	Error string `json:"error,omitempty"`
}

// DRA is the node's mesh device.
type DRA struct {
	Driver string `json:"driver"`
	// DeviceReady is whether the device is published untainted.
	DeviceReady bool `json:"deviceReady"`
	// Taint is the device's taint while it is tainted, as kubectl shows
	// it ("mesh.meshlet.dev/not-ready=ztunnel-disconnected:NoSchedule").
	Taint string `json:"taint,omitempty"`
	// PreparedClaims counts the mesh claims prepared on the node.
	PreparedClaims int `json:"preparedClaims"`
}

// NodeReadiness is the node's taint (--node-taint) or condition
// (--node-condition) as meshlet last wrote it.
type NodeReadiness struct {
	Taint     string `json:"taint,omitempty"`
	Condition string `json:"condition,omitempty"`
	// Published is false until the first write succeeded.
	Published bool `json:"published"`
	// Ready is what the last write said; Reason why not.
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	// Error is the last write's failure.
	Error string `json:"error,omitempty"`
}

// Pod is one of the node's pods as meshlet sees it.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Sandbox is the runtime's ID of the pod's current sandbox.
	Sandbox string    `json:"sandbox,omitempty"`
	State   string    `json:"state"`
	Since   time.Time `json:"since"`
	Reason  string    `json:"reason,omitempty"`
	// NetnsInode is the pod's network namespace (enrolled pods), and
	// Netns a path to it that nsenter --net= takes ("" when none was
	// found: the namespace has no bind mount under /run/netns and no
	// process).
	NetnsInode uint64 `json:"netnsInode,omitempty"`
	Netns      string `json:"netns,omitempty"`
	// Redirection is the in-pod rules' account (backend, families,
	// captures), for an enrolled pod.
	Redirection string `json:"redirection,omitempty"`
	// Ztunnel is "acked" for an enrolled pod while a ztunnel is connected
	// (it acknowledged the pod, or got it in its snapshot), "queued" while
	// none is (the next one gets it), "refused: <ztunnel's reason>" while
	// ztunnel refuses it (meshlet retries; the pod keeps its rules).
	Ztunnel string `json:"ztunnel,omitempty"`
	// Retries counts the failed convergences in a row of a running pod,
	// tried again at RetryAt; LastError is the last failure. An enrolled
	// pod keeps its enrollment meanwhile.
	Retries   int       `json:"retries,omitempty"`
	RetryAt   time.Time `json:"retryAt,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// FailureWindow is how long a pod's failed enrollment counts against the
// node in meshlet status after its last attempt, unless it enrolls.
const FailureWindow = 10 * time.Minute

// Failure is a pod whose last enrollment in a runtime hook failed. The
// runtime removes such a sandbox at once, and the kubelet tries again
// with backoff: the pod is then in no list of the node's pods, and only
// this record says it cannot start.
type Failure struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       string    `json:"uid"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
	// Attempts counts its failed attempts in a row.
	Attempts int `json:"attempts"`
}

// PodStates are the states a pod can be in, as meshlet status names them.
var PodStates = []string{"failed", "enrolled", "pending", "releasing", "released", "skipped", "unknown"}
