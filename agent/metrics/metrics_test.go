package metrics_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/internal/version"
)

type fakeCore struct{}

func (fakeCore) Pods() []enroll.PodStatus { return nil }
func (fakeCore) Retrying() int            { return 0 }

type fakeZtunnel struct{}

func (fakeZtunnel) Connections() int { return 1 }
func (fakeZtunnel) Refused() int     { return 0 }

// gather is reg's families by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// label is m's value of label name.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestBuildInfo: meshlet_build_info is 1 and names the version and the
// Go release.
func TestBuildInfo(t *testing.T) {
	mf := gather(t, metrics.NewRegistry())["meshlet_build_info"]
	if mf == nil || mf.GetType() != dto.MetricType_GAUGE || len(mf.GetMetric()) != 1 {
		t.Fatalf("meshlet_build_info: %v, want one gauge", mf)
	}
	m := mf.GetMetric()[0]
	if m.GetGauge().GetValue() != 1 || label(m, "version") != version.String() || label(m, "goversion") != runtime.Version() {
		t.Errorf("meshlet_build_info %v, want 1{version=%q, goversion=%q}", m, version.String(), runtime.Version())
	}
}

// TestEnrolledObservesFailures: every enrollment in a hook is in
// meshlet_enroll_duration_seconds, by result, failed ones too; a failure
// also counts in meshlet_enroll_failures_total by step. Both results are
// exported before the first enrollment.
func TestEnrolledObservesFailures(t *testing.T) {
	reg := metrics.NewRegistry()
	m := metrics.New(reg, fakeCore{}, fakeZtunnel{}, nil, nil)
	counts := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, s := range gather(t, reg)["meshlet_enroll_duration_seconds"].GetMetric() {
			out[label(s, "result")] = s.GetHistogram().GetSampleCount()
		}
		return out
	}
	if got := counts(); len(got) != 2 || got["enrolled"] != 0 || got["failed"] != 0 {
		t.Errorf("before any enrollment: %v, want enrolled and failed at 0", got)
	}
	pod := enroll.PodRef{UID: "u", Name: "p", Namespace: "ns"}
	m.Enrolled(pod, 3*time.Millisecond, nil)
	m.Enrolled(pod, 3*time.Millisecond, nil)
	m.Enrolled(pod, 1500*time.Millisecond, &enroll.Error{UID: "u", Step: enroll.StepProxy, Err: errors.New("no ack")})
	m.Enrolled(pod, time.Millisecond, errors.New("not an enrollment error"))
	if got := counts(); got["enrolled"] != 2 || got["failed"] != 2 {
		t.Errorf("after 2 enrolled and 2 failed: %v", got)
	}
	failures := map[string]float64{}
	for _, s := range gather(t, reg)["meshlet_enroll_failures_total"].GetMetric() {
		failures[label(s, "step")] = s.GetCounter().GetValue()
	}
	if failures["ztunnel"] != 1 || failures["other"] != 1 || failures["resolve"] != 0 {
		t.Errorf("meshlet_enroll_failures_total %v, want ztunnel 1, other 1", failures)
	}
}

// TestExported: Exported lists every family of every registration, with
// its type: the daemon's, the optional parts', the build's and the Go and
// process collectors'. The chart's alerts and dashboard are checked
// against it (deploy's TestChartObservabilityMetricsExist).
func TestExported(t *testing.T) {
	fams, err := metrics.Exported()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		if _, dup := got[f.Name]; dup {
			t.Errorf("%s listed twice", f.Name)
		}
		got[f.Name] = f.Type
	}
	for name, typ := range map[string]string{
		"meshlet_build_info":                      "gauge",
		"meshlet_enroll_duration_seconds":         "histogram",
		"meshlet_enroll_failures_total":           "counter",
		"meshlet_enrolled_pods":                   "gauge",
		"meshlet_late_enrollments_total":          "counter",
		"meshlet_checkpoint_write_failures_total": "counter",
		"meshlet_runtime_connected":               "gauge",
		"meshlet_mode":                            "gauge",
		"meshlet_ztunnel_connections":             "gauge",
		"meshlet_pod_resolve_degraded_total":      "counter",
		"meshlet_dra_prepare_duration_seconds":    "histogram",
		"meshlet_mesh_device_ready":               "gauge",
		"meshlet_gate_decisions_total":            "counter",
		"meshlet_node_readiness_failing":          "gauge",
		"meshlet_settings_valid":                  "gauge",
		"go_goroutines":                           "gauge",
		"process_resident_memory_bytes":           "gauge",
		"process_cpu_seconds_total":               "counter",
	} {
		if got[name] != typ {
			t.Errorf("%s: %q, want a %s", name, got[name], typ)
		}
	}
	n := 0
	for name := range got {
		if strings.HasPrefix(name, "meshlet_") {
			n++
		}
	}
	// docs/running.md lists each meshlet_ family.
	if n != 24 {
		t.Errorf("%d meshlet_ families, want 24: %v", n, fams)
	}
}
