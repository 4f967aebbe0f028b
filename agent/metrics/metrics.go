// Package metrics holds meshlet's Prometheus metrics, on a registry of
// their own, and the /metrics handler. What the adapters count reaches it
// through the small interfaces they declare (nriplugin.Metrics,
// cnifallback.Metrics); failed enrollments also become pod events when an
// API server is known.
package metrics

import (
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/internal/version"
	"github.com/meshlet/meshlet/nriplugin"
)

// NewRegistry is a registry with the Go runtime's and the process's
// collectors, and meshlet_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "meshlet_build_info",
		Help:        "Always 1; its labels name the running build: version (meshlet's) and goversion (the Go release it was built with).",
		ConstLabels: prometheus.Labels{"version": version.String(), "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo)
	return reg
}

// Handler serves reg on /metrics.
func Handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// Metrics are the daemon's enrollment metrics.
type Metrics struct {
	// OnEnrolled, if set, is told of each enrollment in a runtime hook
	// (meshlet status's recent failures).
	OnEnrolled         func(pod enroll.PodRef, err error)
	events             *kube.Events // nil in standalone mode
	enrollDuration     *prometheus.HistogramVec
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
	_ nriplugin.Metrics   = (*Metrics)(nil)
	_ cnifallback.Metrics = (*Metrics)(nil)
)

// Core is what the metrics read of the core.
type Core interface {
	Pods() []enroll.PodStatus
	Retrying() int
}

// Ztunnel is what the metrics read of the ZDS server.
type Ztunnel interface {
	Connections() int
	Refused() int
}

// New registers the daemon's metrics on reg. watcher and events are nil
// without an API server.
func New(reg prometheus.Registerer, core Core, zt Ztunnel, watcher *kube.Watcher, events *kube.Events) *Metrics {
	m := &Metrics{
		events: events,
		enrollDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshlet_enroll_duration_seconds",
			Help: "Time to enroll a pod inside a runtime hook (NRI RunPodSandbox or a meshlet-cni ADD): in-pod rules, ztunnel Add and Ack; by result, enrolled or failed (a failure's step is in meshlet_enroll_failures_total).",
			// 250µs … 2s: the hook's budget is 1.5s.
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 14),
		}, []string{"result"}),
		enrollFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshlet_enroll_failures_total",
			Help: "Enrollments that failed inside a runtime hook, by failed step (resolve, netns, redirect, ztunnel).",
		}, []string{"step"}),
		lateEnrollments: counter("meshlet_late_enrollments_total",
			"Pods enrolled after they started: they started while meshlet was away (or, in CNI mode, out of the CNI chain)."),
		missedRemovals: counter("meshlet_missed_removals_total",
			"Pods in the mesh forgotten because the runtime's pod list no longer shows them: their removal (NRI stop and remove, or a CNI DEL) never reached meshlet."),
		checkpointFailures: counter("meshlet_checkpoint_write_failures_total",
			"Checkpoint writes that failed (a full or read-only state directory); each is retried at the next tick and leaves the file on disk as it was."),
		runtimeConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshlet_runtime_connected",
			Help: "1 while new pods reach meshlet: the NRI connection is up and synchronized, or (CNI mode) meshlet-cni is chained and served.",
		}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshlet_mode",
			Help: "1 for the way pods reach meshlet on this node: nri or cni.",
		}, []string{"mode"}),
		cniReasserts: counter("meshlet_cni_reasserts_total",
			"CNI mode: times meshlet-cni was put back into the CNI chain after something rewrote the conflist."),
		enrollRetries: counter("meshlet_enroll_retries_total",
			"Failed convergences of running pods (a rule rewrite, the pod's namespace, its source); each pod keeps what it had and is tried again with backoff."),
	}
	reg.MustRegister(m.enrollDuration, m.enrollFailures, m.lateEnrollments, m.missedRemovals, m.checkpointFailures, m.runtimeConnected, m.mode, m.cniReasserts,
		m.enrollRetries,
		gaugeFunc("meshlet_enrolled_pods", "Pods currently enrolled in the mesh on this node.", func() float64 {
			n := 0
			for _, p := range core.Pods() {
				if p.State == enroll.StateEnrolled {
					n++
				}
			}
			return float64(n)
		}),
		gaugeFunc("meshlet_ztunnel_connections", "Live ztunnel connections on the ZDS socket.",
			func() float64 { return float64(zt.Connections()) }),
		gaugeFunc("meshlet_enroll_retrying_pods",
			"Running pods whose last convergence failed (a rule rewrite, the pod's namespace, its source): they keep what they had, and meshlet tries again with backoff.",
			func() float64 { return float64(core.Retrying()) }),
		gaugeFunc("meshlet_ztunnel_refused_pods",
			"Running pods whose Add ztunnel refused: they keep their redirection, and meshlet retries the Add until ztunnel takes it (ztunnel retries too).",
			func() float64 { return float64(zt.Refused()) }),
	)
	if watcher != nil {
		reg.MustRegister(
			counterFunc("meshlet_pod_resolve_fallbacks_total", "Pods resolved by a direct API GET because the informer had not seen them yet.",
				func() float64 { return float64(watcher.Fallbacks.Load()) }),
			counterFunc("meshlet_pod_resolve_degraded_total", "Pods decided from their sandbox labels because the API server could not say (unreachable, pod unknown).",
				func() float64 { return float64(watcher.Degraded.Load()) }),
		)
	}
	for _, step := range []string{string(enroll.StepResolve), string(enroll.StepNetns), string(enroll.StepRedirect), string(enroll.StepProxy), stepOther} {
		m.enrollFailures.WithLabelValues(step)
	}
	for _, r := range []string{resultEnrolled, resultFailed} {
		m.enrollDuration.WithLabelValues(r)
	}
	return m
}

// The result label of meshlet_enroll_duration_seconds.
const (
	resultEnrolled = "enrolled"
	resultFailed   = "failed"
)

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterFunc(name, help string, f func() float64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
}

func gaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// oneIf is a boolean as a gauge's value.
func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// stepOther is the step label of a failure outside the core's steps.
const stepOther = "other"

// Enrolled records one enrollment inside a runtime hook.
func (m *Metrics) Enrolled(pod enroll.PodRef, d time.Duration, err error) {
	if m.OnEnrolled != nil {
		m.OnEnrolled(pod, err)
	}
	if err != nil {
		if m.events != nil {
			m.events.EnrollFailed(pod, err)
		}
		step := string(enroll.FailedStep(err))
		if step == "" {
			step = stepOther
		}
		m.enrollFailures.WithLabelValues(step).Inc()
		// Timed too: a failure that took the hook's whole budget is what
		// the latency has to show.
		m.enrollDuration.WithLabelValues(resultFailed).Observe(d.Seconds())
		return
	}
	m.enrollDuration.WithLabelValues(resultEnrolled).Observe(d.Seconds())
}

// Retried counts a failed convergence of a running pod (the core tries it
// again); the first, and every tenth after it, becomes a pod event.
func (m *Metrics) Retried(pod enroll.PodRef, attempt int, next time.Duration, err error) {
	m.enrollRetries.Inc()
	if m.events != nil && (attempt == 1 || attempt%10 == 0) {
		m.events.EnrollRetrying(pod, attempt, next, err)
	}
}

// LateEnrolled counts pods enrolled after they started.
func (m *Metrics) LateEnrolled(n int) { m.lateEnrollments.Add(float64(n)) }

// MissedRemovals counts pods forgotten because the runtime no longer
// lists them.
func (m *Metrics) MissedRemovals(n int) { m.missedRemovals.Add(float64(n)) }

// Connected is whether new pods reach meshlet now.
func (m *Metrics) Connected(c bool) { m.runtimeConnected.Set(oneIf(c)) }

// Mode records the pod source picked: nri or cni.
func (m *Metrics) Mode(mode string) { m.mode.WithLabelValues(mode).Set(1) }

// CNIReasserted counts meshlet-cni put back into a rewritten CNI chain.
func (m *Metrics) CNIReasserted() { m.cniReasserts.Inc() }

// CheckpointFailed counts a failed checkpoint write.
func (m *Metrics) CheckpointFailed() { m.checkpointFailures.Inc() }
