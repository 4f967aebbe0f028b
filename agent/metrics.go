package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/draplugin/claimstore"
	gateserver "github.com/meshlet/meshlet/draplugin/gate/server"
	"github.com/meshlet/meshlet/nriplugin"
)

// metrics are meshlet's Prometheus metrics, on a registry of their own.
// Failed enrollments also become pod events when an API server is known.
type metrics struct {
	events             *kube.Events // nil in standalone mode
	enrollDuration     prometheus.Histogram
	enrollFailures     *prometheus.CounterVec
	lateEnrollments    prometheus.Counter
	missedRemovals     prometheus.Counter
	checkpointFailures prometheus.Counter
	runtimeConnected   prometheus.Gauge
	mode               *prometheus.GaugeVec
	cniReasserts       prometheus.Counter
	enrollRetries      prometheus.Counter
}

var (
	_ nriplugin.Metrics   = (*metrics)(nil)
	_ cnifallback.Metrics = (*metrics)(nil)
)

// ztunnelLink is what the metrics read of the ZDS server.
type ztunnelLink interface {
	Connections() int
	Refused() int
}

var _ ztunnelLink = (*zds.Server)(nil)

func newMetrics(reg prometheus.Registerer, core *enroll.Core, zt ztunnelLink, watcher *kube.Watcher, events *kube.Events) *metrics {
	m := &metrics{
		events: events,
		enrollDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meshlet_enroll_duration_seconds",
			Help: "Time to enroll a pod inside a runtime hook (NRI RunPodSandbox or a meshlet-cni ADD): in-pod rules, ztunnel Add and Ack.",
			// 250µs … 2s: the hook's budget is 1.5s.
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 14),
		}),
		enrollFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshlet_enroll_failures_total",
			Help: "Enrollments that failed inside a runtime hook, by failed step (resolve, netns, redirect, ztunnel).",
		}, []string{"step"}),
		lateEnrollments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_late_enrollments_total",
			Help: "Pods enrolled after they started: they started while meshlet was away (or, in CNI mode, out of the CNI chain).",
		}),
		missedRemovals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_missed_removals_total",
			Help: "Pods in the mesh forgotten because the runtime's pod list no longer shows them: their removal (NRI stop and remove, or a CNI DEL) never reached meshlet.",
		}),
		checkpointFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_checkpoint_write_failures_total",
			Help: "Checkpoint writes that failed (a full or read-only state directory); each is retried at the next tick and leaves the file on disk as it was.",
		}),
		runtimeConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshlet_runtime_connected",
			Help: "1 while new pods reach meshlet: the NRI connection is up and synchronized, or (CNI mode) meshlet-cni is chained and served.",
		}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshlet_mode",
			Help: "1 for the way pods reach meshlet on this node: nri or cni.",
		}, []string{"mode"}),
		cniReasserts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_cni_reasserts_total",
			Help: "CNI mode: times meshlet-cni was put back into the CNI chain after something rewrote the conflist.",
		}),
		enrollRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_enroll_retries_total",
			Help: "Failed convergences of running pods (a rule rewrite, the pod's namespace, its source); each pod keeps what it had and is tried again with backoff.",
		}),
	}
	reg.MustRegister(m.enrollDuration, m.enrollFailures, m.lateEnrollments, m.missedRemovals, m.checkpointFailures, m.runtimeConnected, m.mode, m.cniReasserts,
		m.enrollRetries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshlet_enrolled_pods",
			Help: "Pods currently enrolled in the mesh on this node.",
		}, func() float64 {
			n := 0
			for _, p := range core.Pods() {
				if p.State == enroll.StateEnrolled {
					n++
				}
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshlet_ztunnel_connections",
			Help: "Live ztunnel connections on the ZDS socket.",
		}, func() float64 { return float64(zt.Connections()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshlet_enroll_retrying_pods",
			Help: "Running pods whose last convergence failed (a rule rewrite, the pod's namespace, its source): they keep what they had, and meshlet tries again with backoff.",
		}, func() float64 { return float64(core.Retrying()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshlet_ztunnel_refused_pods",
			Help: "Running pods whose Add ztunnel refused: they keep their redirection, and meshlet retries the Add until ztunnel takes it (ztunnel retries too).",
		}, func() float64 { return float64(zt.Refused()) }),
	)
	if watcher != nil {
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "meshlet_pod_resolve_fallbacks_total",
				Help: "Pods resolved by a direct API GET because the informer had not seen them yet.",
			}, func() float64 { return float64(watcher.Fallbacks.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "meshlet_pod_resolve_degraded_total",
				Help: "Pods decided from their sandbox labels because the API server could not say (unreachable, pod unknown).",
			}, func() float64 { return float64(watcher.Degraded.Load()) }),
		)
	}
	for _, step := range []enroll.Step{enroll.StepResolve, enroll.StepNetns, enroll.StepRedirect, enroll.StepProxy} {
		m.enrollFailures.WithLabelValues(string(step))
	}
	return m
}

func (m *metrics) Enrolled(pod enroll.PodRef, d time.Duration, err error) {
	if err != nil {
		if m.events != nil {
			m.events.EnrollFailed(pod, err)
		}
		step := string(enroll.FailedStep(err))
		if step == "" {
			step = "other"
		}
		m.enrollFailures.WithLabelValues(step).Inc()
		return
	}
	m.enrollDuration.Observe(d.Seconds())
}

// Retried counts a failed convergence of a running pod (the core tries it
// again); the first, and every tenth after it, becomes a pod event.
func (m *metrics) Retried(pod enroll.PodRef, attempt int, next time.Duration, err error) {
	m.enrollRetries.Inc()
	if m.events != nil && (attempt == 1 || attempt%10 == 0) {
		m.events.EnrollRetrying(pod, attempt, next, err)
	}
}

func (m *metrics) LateEnrolled(n int) { m.lateEnrollments.Add(float64(n)) }

func (m *metrics) MissedRemovals(n int) { m.missedRemovals.Add(float64(n)) }

func (m *metrics) Connected(c bool) {
	if c {
		m.runtimeConnected.Set(1)
	} else {
		m.runtimeConnected.Set(0)
	}
}

// draPrepareObserver registers the histogram of the DRA plugin's Prepare
// calls and returns its observer.
func draPrepareObserver(reg prometheus.Registerer) func(time.Duration) {
	prepare := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "meshlet_dra_prepare_duration_seconds",
		Help: "Time to prepare the kubelet's mesh claims: validation and the write of the prepared-claims file.",
		// 100µs … 0.8s.
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
	})
	reg.MustRegister(prepare)
	return func(d time.Duration) { prepare.Observe(d.Seconds()) }
}

// gateObserver counts the container gate's answers by decision.
func gateObserver(reg prometheus.Registerer) func(gateserver.Decision) {
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

// registerDRAMetrics adds the DRA kubelet plugin's claim and device metrics.
func registerDRAMetrics(reg prometheus.Registerer, driver *draplugin.Driver, claims *claimstore.Store) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshlet_dra_prepared_claims",
			Help: "Mesh ResourceClaims prepared on this node (in the prepared-claims file).",
		}, func() float64 { return float64(claims.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "meshlet_dra_prepare_refusals_total",
			Help: "Claims refused by Prepare (invalid MeshConfig, a pod that cannot be meshed), counting the kubelet's retries.",
		}, func() float64 { return float64(driver.Refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshlet_mesh_device_ready",
			Help: "1 while this meshlet publishes the node's mesh device untainted (the node can enroll pods).",
		}, func() float64 {
			if driver.DeviceReady() {
				return 1
			}
			return 0
		}),
	)
}

// settingsValidMetric registers meshlet_settings_valid, one series per
// --config-map: 1 while its document is in use (or the ConfigMap does not
// exist, giving nothing), 0 while its document cannot be used or it has
// not been read (the API server has not answered, or RBAC forbids it). It
// returns the function that sets it.
func settingsValidMetric(reg prometheus.Registerer, refs []kube.ObjectRef) func(kube.ObjectRef, bool) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshlet_settings_valid",
		Help: "Whether the node settings document of each --config-map ConfigMap is in use (1), or cannot be used or has not been read (0)."},
		[]string{"configmap"})
	reg.MustRegister(g)
	for _, ref := range refs {
		g.WithLabelValues(ref.String()).Set(0)
	}
	return func(ref kube.ObjectRef, ok bool) {
		v := 0.0
		if ok {
			v = 1
		}
		g.WithLabelValues(ref.String()).Set(v)
	}
}
