package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/meshready"
	gateserver "github.com/meshlet/meshlet/draplugin/gate/server"
)

// DRAPrepareObserver registers the histogram of the DRA plugin's Prepare
// calls and returns its observer.
func DRAPrepareObserver(reg prometheus.Registerer) func(time.Duration) {
	prepare := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "meshlet_dra_prepare_duration_seconds",
		Help: "Time to prepare the kubelet's mesh claims: validation and the write of the prepared-claims file.",
		// 100µs … 0.8s.
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
	})
	reg.MustRegister(prepare)
	return func(d time.Duration) { prepare.Observe(d.Seconds()) }
}

// GateObserver counts the container gate's answers by decision.
func GateObserver(reg prometheus.Registerer) func(gateserver.Decision) {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlet_gate_decisions_total",
		Help: "Answers to meshlet-gate, the mesh device's container hook, by decision: allowed, refused (the container's pod is not enrolled), invalid (an unreadable request).",
	}, []string{"decision"})
	for _, d := range []gateserver.Decision{gateserver.Allowed, gateserver.Refused, gateserver.Invalid} {
		decisions.WithLabelValues(string(d))
	}
	reg.MustRegister(decisions)
	return func(d gateserver.Decision) { decisions.WithLabelValues(string(d)).Inc() }
}

// DRADriver is what the metrics read of the DRA kubelet plugin
// (*draplugin.Driver).
type DRADriver interface {
	DeviceReady() bool
	Refusals() uint64
}

// Claims is what the metrics read of the prepared claims
// (*claimstore.Store).
type Claims interface {
	Len() int
}

// RegisterDRA adds the DRA kubelet plugin's claim and device metrics.
func RegisterDRA(reg prometheus.Registerer, driver DRADriver, claims Claims) {
	reg.MustRegister(
		gaugeFunc("meshlet_dra_prepared_claims", "Mesh ResourceClaims prepared on this node (in the prepared-claims file).",
			func() float64 { return float64(claims.Len()) }),
		counterFunc("meshlet_dra_prepare_refusals_total", "Claims refused by Prepare (invalid MeshConfig, a pod that cannot be meshed), counting the kubelet's retries.",
			func() float64 { return float64(driver.Refusals()) }),
		gaugeFunc("meshlet_mesh_device_ready", "1 while this meshlet publishes the node's mesh device untainted (the node can enroll pods).",
			func() float64 { return oneIf(driver.DeviceReady()) }),
	)
}

// NodeReadiness is what the metrics read of the node taint's (or
// condition's) publisher (*kube.NodeReadiness).
type NodeReadiness interface {
	Published() (meshready.State, bool, error)
}

// RegisterNodeReadiness registers the node taint's (or condition's)
// metrics.
func RegisterNodeReadiness(reg prometheus.Registerer, nr NodeReadiness) {
	reg.MustRegister(
		gaugeFunc("meshlet_node_mesh_ready", "1 while the node's taint (or condition) as this meshlet last wrote it says the node's mesh takes new pods.",
			func() float64 { st, ok, _ := nr.Published(); return oneIf(ok && st.Ready) }),
		gaugeFunc("meshlet_node_readiness_failing", "1 while this meshlet's last write of the node's taint (or condition) failed.",
			func() float64 { _, _, err := nr.Published(); return oneIf(err != nil) }),
	)
}

// SettingsValid registers meshlet_settings_valid, one series per
// --config-map: 1 while its document is in use (or the ConfigMap does not
// exist, giving nothing), 0 while its document cannot be used or it has
// not been read (the API server has not answered, or RBAC forbids it). It
// returns the function that sets it.
func SettingsValid(reg prometheus.Registerer, refs []kube.ObjectRef) func(kube.ObjectRef, bool) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshlet_settings_valid",
		Help: "Whether the node settings document of each --config-map ConfigMap is in use (1), or cannot be used or has not been read (0)."},
		[]string{"configmap"})
	reg.MustRegister(g)
	for _, ref := range refs {
		g.WithLabelValues(ref.String()).Set(0)
	}
	return func(ref kube.ObjectRef, ok bool) {
		g.WithLabelValues(ref.String()).Set(oneIf(ok))
	}
}
