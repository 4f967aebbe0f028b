package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"unicode"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/internal/helmchart"
)

// The chart's observability objects, everything on.
var observabilityArgs = []string{"--set", "metrics.prometheusRule.enabled=true,metrics.prometheusRule.labels.release=prom,dashboards.enabled=true"}

// prometheusRule is the one PrometheusRule in objs.
func prometheusRule(t *testing.T, objs []helmchart.Object) *helmchart.PrometheusRule {
	t.Helper()
	var found []*helmchart.PrometheusRule
	for _, o := range objs {
		if o.Rule != nil {
			found = append(found, o.Rule)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(found))
	}
	return found[0]
}

// alerts is every alerting rule of pr.
func alerts(pr *helmchart.PrometheusRule) []helmchart.Rule {
	var out []helmchart.Rule
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// dashboardConfigMap is the ConfigMap holding the dashboard, or nil.
func dashboardConfigMap(objs []helmchart.Object) *corev1.ConfigMap {
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok && cm.Name == helmchart.Release+"-dashboards" {
			return cm
		}
	}
	return nil
}

// grafanaDashboard is the part of Grafana's dashboard model the test reads.
type grafanaDashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// dashboard decodes the rendered dashboard.
func dashboard(t *testing.T, objs []helmchart.Object) grafanaDashboard {
	t.Helper()
	cm := dashboardConfigMap(objs)
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	raw, ok := cm.Data["meshlet.json"]
	if !ok {
		t.Fatalf("dashboard ConfigMap's keys %v, want meshlet.json", slices.Collect(func(yield func(string) bool) {
			for k := range cm.Data {
				if !yield(k) {
					return
				}
			}
		}))
	}
	var d grafanaDashboard
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

// githubAnchors are the anchors GitHub gives the headings of a Markdown
// file: the heading's text in lower case, spaces as '-', punctuation other
// than '-' and '_' dropped; a repeated anchor gets -1, -2, ...
func githubAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// alertSections are the ### headings of docs/operations.md's "## Alerts".
func alertSections(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## Alerts"
			continue
		}
		if name, ok := strings.CutPrefix(line, "### "); ok && in {
			out = append(out, name)
		}
	}
	return out
}

// TestChartAlerts: every alert of the PrometheusRule has an expression, a
// severity, a summary and a description that Prometheus can expand, and a
// runbook_url pointing at its own section of docs/operations.md, which
// exists; the sections of "## Alerts" are the alerts, one each.
func TestChartAlerts(t *testing.T) {
	const base = "https://example.com/meshlet/docs/operations.md"
	objs := render(t, append(observabilityArgs, "--set", "metrics.prometheusRule.runbookBaseURL="+base)...)
	pr := prometheusRule(t, objs)
	if pr.Labels["release"] != "prom" || pr.Labels["app.kubernetes.io/name"] != "meshlet" || pr.Namespace != helmchart.Namespace {
		t.Errorf("PrometheusRule %s/%s labels %v: want the chart's and release=prom", pr.Namespace, pr.Name, pr.Labels)
	}
	anchors := githubAnchors(t, "../docs/operations.md")
	var names []string
	for _, r := range alerts(pr) {
		names = append(names, r.Alert)
		if strings.TrimSpace(r.Expr) == "" {
			t.Errorf("%s: no expr", r.Alert)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
		}
		for _, a := range []string{"summary", "description"} {
			text := r.Annotations[a]
			if strings.TrimSpace(text) == "" {
				t.Errorf("%s: no %s", r.Alert, a)
				continue
			}
			if out, err := expandAlertTemplate(text); err != nil {
				t.Errorf("%s: %s: %v", r.Alert, a, err)
			} else if strings.Contains(out, "{{") || !strings.Contains(out, "node-1") {
				t.Errorf("%s: %s expands to %q: want the node's name in it", r.Alert, a, out)
			}
		}
		anchor := strings.ToLower(r.Alert)
		if want := base + "#" + anchor; r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !anchors[anchor] {
			t.Errorf("%s: docs/operations.md has no heading with anchor #%s", r.Alert, anchor)
		}
	}
	if len(names) == 0 {
		t.Fatal("no alerts")
	}
	sorted := slices.Sorted(slices.Values(names))
	if !slices.Equal(slices.Compact(slices.Clone(sorted)), sorted) {
		t.Errorf("alert names repeat: %v", names)
	}
	if docs := slices.Sorted(slices.Values(alertSections(t))); !slices.Equal(docs, sorted) {
		t.Errorf("docs/operations.md, Alerts: sections %v, want one per alert: %v", docs, sorted)
	}
	// The default runbook is this repository's.
	pr = prometheusRule(t, render(t, observabilityArgs...))
	for _, r := range alerts(pr) {
		if want := "https://github.com/meshlet/meshlet/blob/main/docs/operations.md#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
}

// expandAlertTemplate expands an alert's annotation as Prometheus does
// (Go's text/template, $labels and $value defined first), for a series of
// node node-1 with value 1.5.
func expandAlertTemplate(text string) (string, error) {
	funcs := template.FuncMap{
		"humanize":         func(v float64) string { return fmt.Sprint(v) },
		"humanizeDuration": func(v float64) string { return fmt.Sprintf("%gs", v) },
	}
	tmpl, err := template.New("alert").Funcs(funcs).Option("missingkey=zero").
		Parse("{{$labels := .Labels}}{{$value := .Value}}" + text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = tmpl.Execute(&b, struct {
		Labels map[string]string
		Value  float64
	}{map[string]string{"node": "node-1", "instance": "10.0.0.1:9881", "step": "ztunnel", "configmap": "meshlet-system/meshlet-settings"}, 1.5})
	return b.String(), err
}

// TestChartDashboard: the dashboard ConfigMap carries the sidecar's label
// and a Grafana dashboard whose panels all read the data source variable,
// with a variable for the meshlets shown.
func TestChartDashboard(t *testing.T) {
	objs := render(t, append(observabilityArgs, "--set", "dashboards.annotations.grafana_folder=Mesh")...)
	cm := dashboardConfigMap(objs)
	if cm == nil || cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "Mesh" || cm.Namespace != helmchart.Namespace {
		t.Fatalf("dashboard ConfigMap %+v: want label grafana_dashboard=1, annotation grafana_folder=Mesh", cm)
	}
	d := dashboard(t, objs)
	if d.UID != "meshlet" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["instance"] != "query" {
		t.Errorf("dashboard variables %v: want datasource (a data source) and instance (a query)", vars)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeats", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the variable ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: %s does not select $instance", p.Title, tg.Expr)
			}
		}
	}
}

// metricName is a metric name in PromQL: meshlet's, the process
// collector's, the Go collector's.
var metricName = regexp.MustCompile(`\b(?:meshlet|process|go)_[A-Za-z0-9_:]*`)

// TestChartObservabilityMetricsExist: every metric the alerts' and the
// dashboard's expressions read is one meshlet exports (metrics.Exported:
// its registrations, run), by its family's name or, for a histogram, by
// its _bucket, _sum or _count series (a summary's _sum and _count). A
// metric renamed in agent/metrics fails this until the chart follows.
func TestChartObservabilityMetricsExist(t *testing.T) {
	fams, err := metrics.Exported()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, f := range fams {
		types[f.Name] = f.Type
	}
	objs := render(t, observabilityArgs...)
	exprs := map[string]string{} // where → expr
	for _, r := range alerts(prometheusRule(t, objs)) {
		if r.Alert == "MeshletDown" {
			// Prometheus's own series for the scrape: meshlet exports none
			// while it is down.
			if !strings.HasPrefix(r.Expr, `up{job="meshlet-metrics"} == 0`) {
				t.Errorf("alert MeshletDown: %q, want up{job=\"meshlet-metrics\"} (the ServiceMonitor's Service)", r.Expr)
			}
			continue
		}
		exprs["alert "+r.Alert] = r.Expr
	}
	d := dashboard(t, objs)
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			exprs[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				exprs["variable "+v.Name] = s
			}
		}
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, name := range names {
			fam, err := family(name, types)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			}
			used[fam] = true
		}
	}
	// What the alerts must watch: each problem they are there to catch.
	for _, name := range []string{"meshlet_ztunnel_connections", "meshlet_runtime_connected", "meshlet_enroll_failures_total",
		"meshlet_enroll_duration_seconds", "meshlet_late_enrollments_total", "meshlet_settings_valid", "meshlet_checkpoint_write_failures_total",
		"meshlet_cni_reasserts_total", "meshlet_mesh_device_ready", "meshlet_node_readiness_failing",
		"meshlet_build_info", "meshlet_gate_decisions_total", "meshlet_dra_prepare_duration_seconds", "process_resident_memory_bytes", "process_cpu_seconds_total"} {
		if !used[name] {
			t.Errorf("%s: neither an alert nor the dashboard reads it", name)
		}
	}
}

// family is the exported family a series name in PromQL belongs to.
func family(name string, types map[string]string) (string, error) {
	if typ, ok := types[name]; ok {
		if typ == "histogram" || typ == "summary" {
			return "", fmt.Errorf("%s is a %s: PromQL reads its _bucket, _sum or _count", name, typ)
		}
		return name, nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch types[base] {
		case "histogram":
			return base, nil
		case "summary":
			if suffix != "_bucket" {
				return base, nil
			}
		}
	}
	return "", fmt.Errorf("%s: meshlet exports no such metric (agent/metrics.Exported)", name)
}

// TestChartServiceMonitorRelabelings: the ServiceMonitor's endpoint has
// the chart's node relabeling, then metrics.serviceMonitor.relabelings;
// metricRelabelings only when some are given.
func TestChartServiceMonitorRelabelings(t *testing.T) {
	monitor := func(objs []helmchart.Object) *helmchart.ServiceMonitor {
		t.Helper()
		for _, o := range objs {
			if o.Monitor != nil {
				return o.Monitor
			}
		}
		t.Fatal("no ServiceMonitor")
		return nil
	}
	sm := monitor(render(t, "--set", "metrics.serviceMonitor.enabled=true"))
	ep := sm.Spec.Endpoints[0]
	if len(ep.Relabelings) != 1 || ep.Relabelings[0].TargetLabel != "node" || len(ep.MetricRelabelings) != 0 {
		t.Errorf("default endpoint: relabelings %+v, metricRelabelings %+v: want the node's only", ep.Relabelings, ep.MetricRelabelings)
	}
	sm = monitor(render(t, "--set", "metrics.serviceMonitor.enabled=true",
		"--set-json", `metrics.serviceMonitor.relabelings=[{"sourceLabels":["__meta_kubernetes_pod_label_app_kubernetes_io_version"],"targetLabel":"version"}]`,
		"--set-json", `metrics.serviceMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":"go_gc_.*","action":"drop"}]`))
	ep = sm.Spec.Endpoints[0]
	if len(ep.Relabelings) != 2 || ep.Relabelings[0].TargetLabel != "node" || ep.Relabelings[1].TargetLabel != "version" ||
		!slices.Equal(ep.Relabelings[1].SourceLabels, []string{"__meta_kubernetes_pod_label_app_kubernetes_io_version"}) {
		t.Errorf("relabelings %+v: want the node's, then the value's", ep.Relabelings)
	}
	if len(ep.MetricRelabelings) != 1 || ep.MetricRelabelings[0].Action != "drop" || ep.MetricRelabelings[0].Regex != "go_gc_.*" {
		t.Errorf("metricRelabelings %+v: want the value's", ep.MetricRelabelings)
	}
}

// TestChartObservabilityOff: by default the chart renders no
// PrometheusRule, no dashboard and no ServiceMonitor.
func TestChartObservabilityOff(t *testing.T) {
	for _, o := range render(t) {
		if o.Rule != nil || o.Monitor != nil || o.Kind == "PrometheusRule" || o.Kind == "ServiceMonitor" {
			t.Errorf("default values render %s %s", o.Kind, o.Name)
		}
	}
	if cm := dashboardConfigMap(render(t)); cm != nil {
		t.Errorf("default values render the dashboard ConfigMap %s", cm.Name)
	}
}
