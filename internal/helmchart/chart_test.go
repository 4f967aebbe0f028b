package helmchart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshlet/meshlet/agent"
	"github.com/meshlet/meshlet/agent/nodesettings"
	"github.com/meshlet/meshlet/internal/flagenv"
	"github.com/meshlet/meshlet/internal/helmchart"
	"github.com/meshlet/meshlet/internal/privtest"
)

// helm is the helm binary hack/install-helm.sh builds, on this repository.
func helm(t *testing.T) helmchart.Helm {
	t.Helper()
	dir := privtest.RequireEnv(t, helmchart.HelmEnv, "the directory hack/install-helm.sh prints; `make test` sets it")
	return helmchart.Helm{Bin: filepath.Join(dir, "helm"), Root: root}
}

// render is helm template with args, without the hooks (renderHooks);
// a failure fails the test.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	return slices.DeleteFunc(renderAll(t, args...), isHook)
}

// renderHooks is the hooks helm template with args renders.
func renderHooks(t *testing.T, args ...string) []object {
	t.Helper()
	return slices.DeleteFunc(renderAll(t, args...), func(o object) bool { return !isHook(o) })
}

// renderAll is every object helm template with args renders.
func renderAll(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := helm(t).Template(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, "helm template "+strings.Join(args, " "), out)
}

// isHook: o is a Helm hook (the chart's pre-delete job and its account),
// not a release object.
func isHook(o object) bool {
	m, err := meta.Accessor(o.Obj)
	return err == nil && m.GetAnnotations()["helm.sh/hook"] != ""
}

// renderValues renders with the values given as YAML (a values file).
func renderValues(t *testing.T, values string, args ...string) []object {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return render(t, append([]string{"-f", f}, args...)...)
}

// root is the repository's root, from this package's directory.
const root = "../.."

type object = helmchart.Object

// decodeAll decodes every rendered object strictly (helmchart.Decode).
func decodeAll(t *testing.T, source string, data []byte) []object {
	t.Helper()
	objs, err := helmchart.Decode(data)
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	return objs
}

// only returns the one object of kind T, failing unless there is exactly one.
func only[T runtime.Object](t *testing.T, objs []object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.Obj.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// named is the object of type T named name.
func named[T interface {
	runtime.Object
	GetName() string
}](t *testing.T, objs []object, name string) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.Obj.(T); ok && v.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %s", zero, name)
	return zero
}

func kinds(objs []object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Kind)
	}
	sort.Strings(out)
	return out
}

// env is the container's variables with a literal value, by name.
func env(t *testing.T, ds *appsv1.DaemonSet) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if _, dup := out[e.Name]; dup {
			t.Errorf("variable %s set twice", e.Name)
		}
		if e.ValueFrom == nil {
			out[e.Name] = e.Value
		}
	}
	return out
}

func volumePaths(ds *appsv1.DaemonSet) map[string]string {
	out := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			out[v.Name] = v.HostPath.Path
		}
	}
	return out
}

// TestGeneratedFilesCurrent: deploy's manifests and the chart's golden
// files are what the chart renders now (`make manifests` writes them).
func TestGeneratedFilesCurrent(t *testing.T) {
	files, err := helm(t).Generate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(helmchart.Files()) {
		t.Fatalf("%d files generated, want %d", len(files), len(helmchart.Files()))
	}
	for path, want := range files {
		committed := filepath.Join(root, path)
		got, err := os.ReadFile(committed)
		if err != nil {
			t.Errorf("%s: %v (run `make manifests`)", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the chart renders: run `make manifests`\n%s", path, diff(t, committed, want))
		}
	}
}

// diff is `diff -u` of the file at path and want.
func diff(t *testing.T, path string, want []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "rendered")
	if err := os.WriteFile(f, want, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("diff", "-u", "--label", path+" (committed)", "--label", path+" (rendered)", path, f).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return fmt.Sprintf("(no diff: %v)", err)
	}
	return string(out)
}

// TestHelmLint: helm lint --strict passes with each platform and with the
// optional objects on.
func TestHelmLint(t *testing.T) {
	h := helm(t)
	for _, p := range helmchart.Platforms {
		for _, extra := range [][]string{nil, {"--set", "dra.enabled=false,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,dashboards.enabled=true,namespace.create=true,resourceQuota.enabled=true"}} {
			args := append([]string{"--set", "platform=" + p}, extra...)
			if out, err := h.Lint(context.Background(), args...); err != nil {
				t.Errorf("helm lint %v: %v\n%s", args, err, out)
			}
		}
	}
}

// TestChartRendersStrictly: with each platform, and with every optional
// object and many values set, every rendered object decodes strictly with
// the Kubernetes API types (the schema check of the manifests).
func TestChartRendersStrictly(t *testing.T) {
	const everything = `
namespace: {create: true}
resourceQuota: {enabled: true}
serviceAccount: {annotations: {iam.example.com/role: meshlet}}
dra: {enabled: true, driverName: mesh.example.com}
metrics:
  serviceMonitor:
    enabled: true
    interval: 30s
    scrapeTimeout: 10s
    labels: {release: prom}
    relabelings: [{sourceLabels: [__meta_kubernetes_pod_host_ip], targetLabel: host_ip}]
    metricRelabelings: [{sourceLabels: [__name__], regex: go_gc_.*, action: drop}, {action: hashmod, sourceLabels: [pod], modulus: 4, targetLabel: shard, separator: ";", replacement: $1}]
  prometheusRule: {enabled: true, labels: {release: prom}, runbookBaseURL: "https://docs.example.com/meshlet/operations.md"}
dashboards: {enabled: true, labels: {grafana_dashboard: "1"}, annotations: {grafana_folder: Mesh}}
podAnnotations: {example.com/a: "1"}
podLabels: {example.com/team: mesh}
extraArgs: [-vmodule=enroll=4]
extraEnv: [{name: GODEBUG, value: "madvdontneed=1"}]
extraVolumes: [{name: kubeconfig, secret: {secretName: meshlet-kubeconfig}}]
extraVolumeMounts: [{name: kubeconfig, mountPath: /etc/meshlet, readOnly: true}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: example.com/mesh, operator: Exists}]}]
imagePullSecrets: [{name: registry}]
securityContext:
  privileged: false
  capabilities: {add: [NET_ADMIN, SYS_ADMIN], drop: [ALL]}
config: {kubeconfig: /etc/meshlet/kubeconfig}
`
	for _, p := range helmchart.Platforms {
		objs := render(t, "--set", "platform="+p)
		want := []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "DeviceClass",
			"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ServiceAccount",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy",
			"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"}
		if p == "gke" {
			want = slices.Insert(want, 7, "ResourceQuota")
		}
		if got := kinds(objs); !slices.Equal(got, want) {
			t.Errorf("platform %q: kinds %v, want %v", p, got, want)
		}
		objs = renderValues(t, everything, "--set", "platform="+p)
		want = []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "DaemonSet", "DeviceClass",
			"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "Namespace", "PrometheusRule", "ResourceQuota", "Service", "ServiceAccount", "ServiceMonitor",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy",
			"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"}
		if got := kinds(objs); !slices.Equal(got, want) {
			t.Errorf("platform %q, every option: kinds %v, want %v", p, got, want)
		}
		ds := only[*appsv1.DaemonSet](t, objs)
		c := ds.Spec.Template.Spec.Containers[0]
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil || len(sc.Capabilities.Add) != 2 {
			t.Errorf("securityContext %+v, want the value's (not privileged, two capabilities)", sc)
		}
		if !slices.Equal(c.Args, []string{"-vmodule=enroll=4"}) {
			t.Errorf("args %v, want extraArgs", c.Args)
		}
		if e := env(t, ds); e["GODEBUG"] != "madvdontneed=1" || e["MESHLET_KUBECONFIG"] != "/etc/meshlet/kubeconfig" {
			t.Errorf("env %v: want extraEnv's GODEBUG and config's MESHLET_KUBECONFIG", e)
		}
	}
}

// TestChartValuesRefused: a wrong value fails helm template (as it fails
// helm install) with a message naming it.
func TestChartValuesRefused(t *testing.T) {
	h := helm(t)
	for _, c := range []struct {
		args []string
		want []string // all in helm's message
	}{
		{[]string{"--set", "platform=aks"}, []string{"/platform", "gke", "openshift", "minikube"}},
		{[]string{"--set", "global.platform=aks"}, []string{"/global/platform", "gke"}},
		{[]string{"--set", "profile=kind"}, []string{"/profile", "containerd", "k3s"}},
		{[]string{"--set", "image.digest=sha256:abc"}, []string{"/image/digest"}},
		{[]string{"--set", "serviceAccount.create=false"}, []string{"serviceAccount.name"}},
		{[]string{"--set", "resourceQuota.pods=0"}, []string{"/resourceQuota/pods"}},
		{[]string{"--set", "updateStrategy.type=Recreate"}, []string{"/updateStrategy/type"}},
		{[]string{"--set", "securityContext.capabilities.add={NET_ADMIN,CAP_SYS_ADMIN}"}, []string{"SYS_ADMIN", "allowPrivilegeEscalation"}},
		{[]string{"--kube-version", "1.29.0"}, []string{"kubeVersion", ">=1.30"}},
		{[]string{"--set", "config.mode=ebpf"}, []string{"/config/mode", "auto", "nri", "cni"}},
		{[]string{"--set", "config.redirect-backend=ebpf"}, []string{"/config/redirect-backend", "nftables", "iptables"}},
		{[]string{"--set", "config.iptables-variant=both"}, []string{"/config/iptables-variant"}},
		{[]string{"--set", "config.ztunnel-sockit=/x"}, []string{"/config", "ztunnel-sockit"}},
		{[]string{"--set", "config.dra-slots=129"}, []string{"/config/dra-slots"}},
		{[]string{"--set", "config.excluded-namespaces={kube-system,Istio_System}"}, []string{"/config/excluded-namespaces/1"}},
		{[]string{"--set", "config.denied-runtime-handlers=runsc\\,gVisor"}, []string{"/config/denied-runtime-handlers"}},
		{[]string{"--set", "config.excluded-namespaces=-a"}, []string{"/config/excluded-namespaces"}},
		{[]string{"--set", "config.ipv6=maybe"}, []string{"/config/ipv6"}},
		{[]string{"--set", "config.enroll-timeout=soon"}, []string{"/config/enroll-timeout"}},
		{[]string{"--set", "config.cri-resync-interval=often"}, []string{"/config/cri-resync-interval"}},
		{[]string{"--set", "config.nri-plugin-index=7"}, []string{"/config/nri-plugin-index"}},
		{[]string{"--set", "paths.cniBinDir=opt/cni/bin"}, []string{"/paths/cniBinDir"}},
		{[]string{"--set", "paths.stateDir="}, []string{"/paths/stateDir"}},
		{[]string{"--set", "dra.driverName=Mesh_Driver"}, []string{"/dra/driverName"}},
		{[]string{"--set", "image.pullPolicy=Sometimes"}, []string{"/image/pullPolicy"}},
		{[]string{"--set", "updateStrategy.rollingUpdate.maxSurge=lots"}, []string{"/updateStrategy/rollingUpdate/maxSurge"}},
		{[]string{"--set", "updateStrategy.maxSurge=lots"}, []string{"/updateStrategy/maxSurge"}},
		{[]string{"--set", "ports.health=9880"}, []string{"ports"}},
		{[]string{"--set", "health.address=localhost"}, []string{"/health/address"}},
		{[]string{"--set", "metrics.address=:70000"}, []string{"/metrics/address"}},
		{[]string{"--set", "extraEnv[0].name=MESHLET_HEALTH_SOCKET,extraEnv[0].value=/x.sock"}, []string{"extraEnv[0]", "MESHLET_HEALTH_SOCKET", "--health-socket"}},
		{[]string{"--set", "extraEnv[0].name=MESHLET_STATE_DIR,extraEnv[0].value=/x"}, []string{"extraEnv[0]", "paths.stateDir"}},
		{[]string{"--set", "metrics.serviceMonitor.enable=true"}, []string{"/metrics/serviceMonitor", "enable"}},
		{[]string{"--set", "metrics.serviceMonitor.relabelings[0].target_label=node"}, []string{"/metrics/serviceMonitor/relabelings/0", "target_label"}},
		{[]string{"--set", "metrics.serviceMonitor.metricRelabelings[0].action=remove"}, []string{"/metrics/serviceMonitor/metricRelabelings/0/action"}},
		{[]string{"--set", "metrics.prometheusRule.runbookBaseURL=https://example.com/ops.md#alerts"}, []string{"/metrics/prometheusRule/runbookBaseURL"}},
		{[]string{"--set", "metrics.prometheusRule.severity=page"}, []string{"/metrics/prometheusRule", "severity"}},
		{[]string{"--set", "dashboards.enable=true"}, []string{"/dashboards", "enable"}},
		{[]string{"--set", "replicas=2"}, []string{"replicas"}},
		{[]string{"--set", "goMemLimitPercent=120"}, []string{"/goMemLimitPercent"}},
		{[]string{"--set", "resources.limits.memory=500m"}, []string{"resources.limits.memory=500m", "goMemLimitPercent"}},
		// Flags the chart derives from other values: the error names the value.
		{[]string{"--set", "config.cri-socket=/run/crio/crio.sock"}, []string{"config.cri-socket", "paths.criSocket"}},
		{[]string{"--set", "config.cni-bin-dir=/x"}, []string{"config.cni-bin-dir", "paths.cniBinDir"}},
		{[]string{"--set", "config.metrics-addr=:1"}, []string{"config.metrics-addr", "metrics.address"}},
		{[]string{"--set", "config.health-socket=/run/h.sock"}, []string{"config.health-socket", "emptyDir"}},
		{[]string{"--set", "config.dra=false"}, []string{"config.dra", "dra.enabled"}},
		{[]string{"--set", "config.node-name=n"}, []string{"config.node-name", "spec.nodeName"}},
		// Values that must agree.
		{[]string{"--set", "updateStrategy.rollingUpdate.maxUnavailable=0,updateStrategy.rollingUpdate.maxSurge=0"}, []string{"maxSurge and maxUnavailable are both 0"}},
		{[]string{"--set", "updateStrategy.rollingUpdate.maxUnavailable=1"}, []string{"maxSurge=1 and maxUnavailable=1", "set maxUnavailable to 0 for a surge"}},
		{[]string{"--set", "nriCheck.enabled=true,config.mode=cni"}, []string{"nriCheck.enabled", "config.mode=cni"}},
		{[]string{"--set", "metrics.serviceMonitor.enabled=true,metrics.address="}, []string{"metrics.serviceMonitor.enabled", "metrics.address"}},
		{[]string{"--set", "metrics.prometheusRule.enabled=true,metrics.address="}, []string{"metrics.prometheusRule.enabled", "metrics.address"}},
		{[]string{"--kube-version", "1.36.0", "--set", "dra.enabled=true"}, []string{"dra.enabled", "1.37"}},
	} {
		_, err := h.Template(context.Background(), c.args...)
		if err == nil {
			t.Errorf("helm template %v: rendered, want an error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("helm template %v: %v\nwant it to name %q", c.args, err, w)
			}
		}
	}
	// The same values pass where the chart allows them.
	render(t, "--kube-version", "1.36.0", "--set", "dra.enabled=false")
	render(t, "--set", "health.address=,metrics.address=")
	render(t, "--set", "config.mode=null") // a later values file may unset a flag
}

// daemonFlags is every flag of cmd/meshlet: the agent's (-v among them)
// and klog's -vmodule (cmd/meshlet's addLogFlags).
func daemonFlags() (*flag.FlagSet, *agent.Config) {
	fs := flag.NewFlagSet("meshlet", flag.ContinueOnError)
	cfg := agent.DefaultConfig()
	cfg.AddFlags(fs)
	fs.String("vmodule", "", "per-file log verbosity")
	return fs, &cfg
}

// configSamples is a value for every daemon flag the chart's config map
// takes, and the flag's value once the daemon has read the variable the
// chart renders for it. The chart-owned flags have none: config refuses
// them.
var configSamples = map[string]struct {
	value any
	want  string
}{
	"v":                       {4, "4"},
	"vmodule":                 {"enroll=5", "enroll=5"},
	"log-format":              {"json", "json"},
	"mode":                    {"cni", "cni"},
	"nri-plugin-index":        {"20", "20"},
	"enroll-timeout":          {"1200ms", "1.2s"},
	"cri-resync-interval":     {"45s", "45s"},
	"ztunnel-snapshot-hold":   {"20s", "20s"},
	"skip-pod-ip-check":       {true, "true"},
	"redirect-backend":        {"iptables", "iptables"},
	"iptables-variant":        {"legacy", "legacy"},
	"standalone":              {true, "true"},
	"unmesh-on-uninstall":     {true, "true"},
	"remove-istio-cni-plugin": {true, "true"},
	"kubeconfig":              {"/etc/meshlet/kubeconfig", "/etc/meshlet/kubeconfig"},
	"excluded-namespaces":     {[]string{"kube-system", "istio-system"}, "kube-system,istio-system"},
	"denied-runtime-handlers": {"runsc, kata", "runsc,kata"},
	"dns-capture":             {false, "false"},
	"ipv6":                    {false, "false"},
	"dra-slots":               {16, "16"},
	"cni-own-conflist":        {true, "true"},
	"cni-plugin-binary":       {"/opt/meshlet/meshlet-cni", "/opt/meshlet/meshlet-cni"},
	"dataplane-mode-label":    {"example.com/mesh", "example.com/mesh"},
	"revision":                {"canary", "canary"},
	"revisionless-pods":       {"skip", "skip"},
	"gate-hook-binary":        {"/opt/meshlet/meshlet-gate", "/opt/meshlet/meshlet-gate"},
	"gate-timeout":            {"1500ms", "1.5s"},
}

// TestChartSchemaKnowsEveryNodeSetting: the schema of
// nodeSettings.settings (which refuses a misspelt setting) takes exactly
// the NodeSettings document's settings.
func TestChartSchemaKnowsEveryNodeSetting(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, helmchart.ChartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			NodeSettings struct {
				Properties struct {
					Settings struct {
						Properties map[string]json.RawMessage `json:"properties"`
					} `json:"settings"`
				} `json:"properties"`
			} `json:"nodeSettings"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(schema.Properties.NodeSettings.Properties.Settings.Properties))
	var settings []string
	doc := reflect.TypeFor[nodesettings.Document]()
	for i := range doc.NumField() {
		name, _, _ := strings.Cut(doc.Field(i).Tag.Get("json"), ",")
		if name != "apiVersion" && name != "kind" {
			settings = append(settings, name)
		}
	}
	slices.Sort(settings)
	if !slices.Equal(keys, settings) {
		t.Fatalf("values.schema.json nodeSettings.settings keys %v\nare not the NodeSettings document's settings %v", keys, settings)
	}
}

// TestChartConfigFlags: the config map takes exactly the daemon's flags;
// each is rendered as the variable the daemon reads (a flag the chart sets
// from other values is refused, naming that value), and the daemon parses
// every rendered value back to the value given.
func TestChartConfigFlags(t *testing.T) {
	fs, _ := daemonFlags()
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })

	raw, err := os.ReadFile(filepath.Join(root, helmchart.ChartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Config struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"config"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range schema.Properties.Config.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sort.Strings(flags)
	if !slices.Equal(keys, flags) {
		t.Fatalf("values.schema.json config keys %v\nare not the daemon's flags %v", keys, flags)
	}

	h := helm(t)
	config := map[string]any{}
	for _, name := range flags {
		s, ok := configSamples[name]
		if ok {
			config[name] = s.value
			continue
		}
		// Not in config: the chart sets it, and says from what.
		_, err := h.Template(context.Background(), "--set", "config."+name+"=x")
		if err == nil || !strings.Contains(err.Error(), "the chart sets --"+name+"; set ") {
			t.Errorf("config.%s: %v, want a refusal naming the value that sets it (or add it to configSamples)", name, err)
		}
	}
	// DRA off: config.revision needs it.
	values, err := json.Marshal(map[string]any{"config": config, "dra": map[string]any{"enabled": false}})
	if err != nil {
		t.Fatal(err)
	}
	ds := only[*appsv1.DaemonSet](t, renderValues(t, string(values)))
	vars := env(t, ds)
	fs, _ = daemonFlags()
	if err := flagenv.ApplyEnv(fs, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
		t.Fatalf("the daemon refuses the rendered variables: %v", err)
	}
	for name, s := range configSamples {
		if v, ok := vars[flagenv.EnvName(name)]; !ok {
			t.Errorf("config.%s: no %s rendered", name, flagenv.EnvName(name))
		} else if got := fs.Lookup(name).Value.String(); got != s.want {
			t.Errorf("config.%s=%v: rendered %s=%q, the daemon reads %q, want %q", name, s.value, flagenv.EnvName(name), v, got, s.want)
		}
	}
}

// daemonReads applies the DaemonSet's variables to the daemon's flags, the
// downward API's with stand-in values, and returns the configuration.
// Every MESHLET_* variable must be a flag's.
func daemonReads(t *testing.T, ds *appsv1.DaemonSet) agent.Config {
	t.Helper()
	fs, cfg := daemonFlags()
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[flagenv.EnvName(f.Name)] = true })
	vars := map[string]string{}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if !known[e.Name] && strings.HasPrefix(e.Name, flagenv.EnvPrefix) {
			t.Errorf("%s is no flag's variable", e.Name)
		}
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			vars[e.Name] = "from-" + e.ValueFrom.FieldRef.FieldPath
		default:
			t.Errorf("%s: unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	if err := flagenv.ApplyEnv(fs, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	return *cfg
}

// TestChartDaemonConfigValid: with each platform the daemon accepts the
// DaemonSet's configuration (its own Validate), and the paths it is told
// are the ones mounted from the host at the same place.
func TestChartDaemonConfigValid(t *testing.T) {
	for _, p := range helmchart.Platforms {
		ds := only[*appsv1.DaemonSet](t, render(t, "--set", "platform="+p))
		cfg := daemonReads(t, ds)
		if cfg.NodeName != "from-spec.nodeName" || cfg.DRA.PodUID != "from-metadata.uid" ||
			cfg.PodName != "from-metadata.name" || cfg.PodNamespace != "from-metadata.namespace" {
			t.Errorf("platform %q: the downward API's variables are not the daemon's: %+v", p, cfg)
		}
		// The state directory is the node's; Validate checks it exists or
		// can be made, here.
		stateDir := cfg.StateDir
		cfg.StateDir = t.TempDir()
		if err := cfg.Validate(); err != nil {
			t.Errorf("platform %q: the daemon refuses the chart's configuration: %v", p, err)
		}

		mounts := map[string]string{}
		for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		hostPaths := volumePaths(ds)
		for name, path := range mounts {
			if name == "tmp" { // the pod's own scratch emptyDir
				continue
			}
			if name == "health" { // the pod's own emptyDir: --health-socket
				if filepath.Dir(cfg.HealthSocket) != path {
					t.Errorf("platform %q: --health-socket=%q is not in the health volume (%q)", p, cfg.HealthSocket, path)
				}
				continue
			}
			if hostPaths[name] != path {
				t.Errorf("platform %q: volume %s mounts host %q at %q: the chart mounts host paths at the same path", p, name, hostPaths[name], path)
			}
		}
		for _, c := range []struct{ flag, path, volume string }{
			{"nri-socket", filepath.Dir(cfg.NRI.SocketPath), "nri"},
			{"ztunnel-socket", filepath.Dir(cfg.ZtunnelSocket), "ztunnel"},
			{"state-dir", stateDir, "state"},
			{"cri-socket", filepath.Dir(cfg.CNI.CRISocket), "cri"},
			{"cni-conf-dir", cfg.CNI.ConfDir, "cni-conf"},
			{"cni-bin-dir", cfg.CNI.BinDir, "cni-bin"},
			{"cni-socket", filepath.Dir(cfg.CNI.Socket), "cni-socket"},
			{"kubelet-root-dir", filepath.Join(cfg.DRA.KubeletRootDir, "plugins"), "kubelet-plugins"},
			{"kubelet-root-dir", filepath.Join(cfg.DRA.KubeletRootDir, "plugins_registry"), "kubelet-registry"},
		} {
			if mounts[c.volume] != c.path {
				t.Errorf("platform %q: --%s needs %s mounted, volume %s mounts %q", p, c.flag, c.path, c.volume, mounts[c.volume])
			}
		}
	}
}

// TestChartPlatforms: each platform's host paths (Istio's global.platform
// and the former profile value too, and OpenShift found by its API), and a
// set path winning over its platform's.
func TestChartPlatforms(t *testing.T) {
	for _, c := range []struct {
		args []string
		want map[string]string // variable: value
		vols map[string]string // volume: host path
	}{
		{[]string{}, map[string]string{
			"MESHLET_CRI_SOCKET": "/run/containerd/containerd.sock", "MESHLET_CNI_CONF_DIR": "/etc/cni/net.d",
			"MESHLET_CNI_BIN_DIR": "/opt/cni/bin", "MESHLET_NRI_SOCKET": "/var/run/nri/nri.sock", "MESHLET_KUBELET_ROOT_DIR": "/var/lib/kubelet",
		}, map[string]string{"cri": "/run/containerd", "nri": "/var/run/nri", "kubelet-registry": "/var/lib/kubelet/plugins_registry"}},
		{[]string{"--set", "platform=crio"}, map[string]string{
			"MESHLET_CRI_SOCKET": "/var/run/crio/crio.sock", "MESHLET_NRI_SOCKET": "/var/run/nri/nri.sock", "MESHLET_CNI_BIN_DIR": "/opt/cni/bin",
		}, map[string]string{"cri": "/var/run/crio", "nri": "/var/run/nri"}},
		{[]string{"--set", "global.platform=gke"}, map[string]string{
			"MESHLET_CRI_SOCKET": "/run/containerd/containerd.sock", "MESHLET_CNI_BIN_DIR": "/home/kubernetes/bin",
		}, map[string]string{"cni-bin": "/home/kubernetes/bin"}},
		// The version's -gke, -eks and +k3s are not tested: helm template
		// strips them from --kube-version (helm install reads the server's).
		{[]string{"--api-versions", "security.openshift.io/v1"}, map[string]string{"MESHLET_CRI_SOCKET": "/var/run/crio/crio.sock", "MESHLET_CNI_BIN_DIR": "/var/lib/cni/bin"}, nil},
		{[]string{"--set", "platform=crio,global.platform=gke"}, map[string]string{"MESHLET_CRI_SOCKET": "/var/run/crio/crio.sock", "MESHLET_CNI_BIN_DIR": "/opt/cni/bin"}, nil},
		// containerd: kubeadm-style paths, the cluster's API not asked.
		{[]string{"--set", "platform=containerd", "--api-versions", "security.openshift.io/v1"}, map[string]string{"MESHLET_CRI_SOCKET": "/run/containerd/containerd.sock"}, nil},
		{[]string{"--set", "platform=openshift"}, map[string]string{
			"MESHLET_CRI_SOCKET": "/var/run/crio/crio.sock", "MESHLET_CNI_CONF_DIR": "/etc/kubernetes/cni/net.d", "MESHLET_CNI_BIN_DIR": "/var/lib/cni/bin",
		}, map[string]string{"cni-conf": "/etc/kubernetes/cni/net.d"}},
		{[]string{"--set", "platform=microk8s"}, map[string]string{
			"MESHLET_CRI_SOCKET": "/var/snap/microk8s/common/run/containerd.sock", "MESHLET_CNI_CONF_DIR": "/var/snap/microk8s/current/args/cni-network",
			"MESHLET_CNI_BIN_DIR": "/var/snap/microk8s/current/opt/cni/bin", "MESHLET_KUBELET_ROOT_DIR": "/var/snap/microk8s/common/var/lib/kubelet",
		}, map[string]string{"kubelet-registry": "/var/snap/microk8s/common/var/lib/kubelet/plugins_registry"}},
		{[]string{"--set", "platform=minikube"}, map[string]string{"MESHLET_CNI_CONF_DIR": "/etc/cni/net.mk", "MESHLET_CNI_BIN_DIR": "/opt/cni/bin"}, nil},
		{[]string{"--set", "platform=k3d"}, map[string]string{"MESHLET_CRI_SOCKET": "/run/k3s/containerd/containerd.sock", "MESHLET_CNI_BIN_DIR": "/bin"}, nil},
		{[]string{"--set", "profile=k3s"}, map[string]string{
			"MESHLET_CRI_SOCKET": "/run/k3s/containerd/containerd.sock", "MESHLET_CNI_CONF_DIR": "/var/lib/rancher/k3s/agent/etc/cni/net.d",
			"MESHLET_CNI_BIN_DIR": "/var/lib/rancher/k3s/data/cni", "MESHLET_NRI_SOCKET": "/var/run/nri/nri.sock", "MESHLET_KUBELET_ROOT_DIR": "/var/lib/kubelet",
		}, map[string]string{"cri": "/run/k3s/containerd", "cni-conf": "/var/lib/rancher/k3s/agent/etc/cni/net.d", "cni-bin": "/var/lib/rancher/k3s/data/cni"}},
		{[]string{"--set", "platform=k3s,paths.cniBinDir=/var/lib/rancher/k3s/data/current/bin,paths.kubeletDir=/data/kubelet"}, map[string]string{
			"MESHLET_CRI_SOCKET": "/run/k3s/containerd/containerd.sock", "MESHLET_CNI_BIN_DIR": "/var/lib/rancher/k3s/data/current/bin", "MESHLET_KUBELET_ROOT_DIR": "/data/kubelet",
		}, map[string]string{"cni-bin": "/var/lib/rancher/k3s/data/current/bin", "kubelet-plugins": "/data/kubelet/plugins", "kubelet-registry": "/data/kubelet/plugins_registry"}},
		{[]string{"--set", "paths.criSocket=/var/run/crio/crio.sock,paths.ztunnelSocket=/run/zt/zds.sock,paths.stateDir=/data/meshlet"}, map[string]string{
			"MESHLET_CRI_SOCKET": "/var/run/crio/crio.sock", "MESHLET_ZTUNNEL_SOCKET": "/run/zt/zds.sock", "MESHLET_STATE_DIR": "/data/meshlet",
		}, map[string]string{"cri": "/var/run/crio", "ztunnel": "/run/zt", "state": "/data/meshlet"}},
	} {
		ds := only[*appsv1.DaemonSet](t, render(t, c.args...))
		e, v := env(t, ds), volumePaths(ds)
		for k, want := range c.want {
			if e[k] != want {
				t.Errorf("%v: %s=%q, want %q", c.args, k, e[k], want)
			}
		}
		for k, want := range c.vols {
			if v[k] != want {
				t.Errorf("%v: volume %s from host %q, want %q", c.args, k, v[k], want)
			}
		}
	}
}

// TestChartDaemonSet: the DaemonSet's fixed shape and its values.
// TestChartGoMemLimit: GOMEMLIMIT is goMemLimitPercent of the memory
// limit, in bytes, whatever unit the limit is written in; none without a
// limit or with goMemLimitPercent=0.
func TestChartGoMemLimit(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "": no GOMEMLIMIT
	}{
		{nil, "120795955"}, // 90% of the default 128Mi
		{[]string{"--set", "resources.limits.memory=200M"}, "180000000"},
		{[]string{"--set", "resources.limits.memory=1Gi,goMemLimitPercent=50"}, "536870912"},
		{[]string{"--set", "resources.limits.memory=100000000"}, "90000000"},
		{[]string{"--set", "resources.limits.memory=1.5Gi"}, "1449551462"},
		{[]string{"--set-json", `resources={"limits":{"memory":134217728}}`}, "120795955"}, // a YAML number
		{[]string{"--set", "goMemLimitPercent=0"}, ""},
		{[]string{"--set", "resources.limits=null"}, ""},
	} {
		c := only[*appsv1.DaemonSet](t, render(t, tc.args...)).Spec.Template.Spec.Containers[0]
		got := ""
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				got = e.Value
			}
		}
		if got != tc.want {
			t.Errorf("%v: GOMEMLIMIT %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestChartDaemonSet(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, render(t))
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, dnsPolicy %s, priorityClassName %q", spec.HostNetwork, spec.DNSPolicy, spec.PriorityClassName)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v, want [{operator: Exists}]", spec.Tolerations)
	}
	// Not privileged: exactly the capabilities the e2e proves enough
	// (TestDaemonSetOnKubelet runs the chart's defaults on a real kubelet).
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}) {
		t.Errorf("securityContext %+v, want not privileged, all capabilities dropped but NET_ADMIN and SYS_ADMIN", c.SecurityContext)
	}
	if c.Image != "localhost/meshlet/meshlet:dev" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s (%s), want localhost/meshlet/meshlet:dev (IfNotPresent)", c.Image, c.ImagePullPolicy)
	}
	// The probes ask this pod's own meshlet, on a socket in its own
	// emptyDir: a surge pod is probed itself, never the old meshlet that
	// still holds the node's ports. No port is declared (on the host
	// network it would be a host port the surge pod could not get).
	for _, p := range []struct {
		probe    *corev1.Probe
		endpoint string
	}{{c.ReadinessProbe, "readyz"}, {c.LivenessProbe, "healthz"}} {
		if p.probe == nil || p.probe.Exec == nil || !slices.Equal(p.probe.Exec.Command, []string{"/usr/local/bin/meshlet", "probe", p.endpoint}) || p.probe.TimeoutSeconds < 2 {
			t.Errorf("probe %+v, want exec meshlet probe %s with a timeout above the 1 s default", p.probe, p.endpoint)
		}
	}
	if len(c.Ports) != 0 {
		t.Errorf("ports %+v, want none", c.Ports)
	}
	healthDir := ""
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Name == "health" && v.EmptyDir != nil {
				healthDir = m.MountPath
			}
		}
	}
	if e := env(t, ds); healthDir == "" || filepath.Dir(e["MESHLET_HEALTH_SOCKET"]) != healthDir {
		t.Errorf("MESHLET_HEALTH_SOCKET=%q, want a socket in the pod's emptyDir (mounted at %q)", e["MESHLET_HEALTH_SOCKET"], healthDir)
	}
	e := env(t, ds)
	if e["MESHLET_HEALTH_ADDR"] != "127.0.0.1:9880" || e["MESHLET_METRICS_ADDR"] != ":9881" {
		t.Errorf("health %q, metrics %q", e["MESHLET_HEALTH_ADDR"], e["MESHLET_METRICS_ADDR"])
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "netns" && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Errorf("netns mount %+v, want HostToContainer propagation", m)
		}
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("updateStrategy %+v, want RollingUpdate, maxSurge 1, maxUnavailable 0", ds.Spec.UpdateStrategy)
	}
	if ds.Spec.Template.Annotations["prometheus.io/scrape"] != "true" || ds.Spec.Template.Annotations["prometheus.io/port"] != "9881" {
		t.Errorf("pod annotations %v, want Prometheus's", ds.Spec.Template.Annotations)
	}

	// Values.
	ds = only[*appsv1.DaemonSet](t, renderValues(t, `
image: {repository: registry.example.com/meshlet, tag: v1.2.3, pullPolicy: Always}
updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 25%, maxSurge: 0}}
health: {address: "0.0.0.0:19880"}
metrics: {address: "127.0.0.1:19881", podAnnotations: false}
tolerations: [{key: example.com/dedicated, operator: Equal, value: mesh, effect: NoSchedule}]
nodeSelector: {example.com/mesh: "true"}
priorityClassName: ""
resources: {requests: {cpu: 10m}}
podAnnotations: {example.com/owner: mesh-team}
`))
	spec, c = ds.Spec.Template.Spec, ds.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example.com/meshlet:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s (%s)", c.Image, c.ImagePullPolicy)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru.MaxUnavailable.String() != "25%" {
		t.Errorf("maxUnavailable %s, want 25%%", ru.MaxUnavailable.String())
	}
	if e := env(t, ds); e["MESHLET_HEALTH_ADDR"] != "0.0.0.0:19880" || e["MESHLET_METRICS_ADDR"] != "127.0.0.1:19881" {
		t.Errorf("env %v", e)
	}
	if a := ds.Spec.Template.Annotations; a["prometheus.io/scrape"] != "" || a["example.com/owner"] != "mesh-team" || a["tolerate-missing-plugins.meshlet.dev"] != "true" {
		t.Errorf("annotations %v: want podAnnotations', the runtime validator's toleration and no Prometheus ones", a)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "example.com/dedicated" || spec.NodeSelector["example.com/mesh"] != "true" || spec.PriorityClassName != "" {
		t.Errorf("tolerations %+v, nodeSelector %v, priorityClassName %q", spec.Tolerations, spec.NodeSelector, spec.PriorityClassName)
	}
	// Helm merges a map value into the default: the request changes, the
	// rest stays.
	if c.Resources.Requests.Cpu().String() != "10m" || c.Resources.Requests.Memory().String() != "48Mi" || c.Resources.Limits.Memory().String() != "128Mi" {
		t.Errorf("resources %+v, want the value's cpu request over the defaults", c.Resources)
	}

	// Metrics on another port: the annotations name it; no metrics
	// address: no scrape annotations.
	ds = only[*appsv1.DaemonSet](t, render(t, "--set", "metrics.address=:19990"))
	if a := ds.Spec.Template.Annotations; a["prometheus.io/port"] != "19990" {
		t.Errorf("annotations %v, want prometheus.io/port 19990", a)
	}
	ds = only[*appsv1.DaemonSet](t, render(t, "--set", "metrics.address="))
	if e := env(t, ds); e["MESHLET_METRICS_ADDR"] != "" || ds.Spec.Template.Annotations["prometheus.io/scrape"] != "" {
		t.Errorf("MESHLET_METRICS_ADDR=%q, annotations %v; want metrics off, no scrape annotations", e["MESHLET_METRICS_ADDR"], ds.Spec.Template.Annotations)
	}

	// No init container unless asked for; asked for, meshlet enable-nri
	// with the runtime's sockets, and no capability.
	if ic := ds.Spec.Template.Spec.InitContainers; len(ic) != 0 {
		t.Errorf("init containers %+v, want none by default", ic)
	}
	ds = only[*appsv1.DaemonSet](t, render(t, "--set", "nriCheck.enabled=true"))
	if ic := ds.Spec.Template.Spec.InitContainers; len(ic) != 1 || !slices.Equal(ic[0].Args, []string{"enable-nri"}) ||
		ic[0].Image != ds.Spec.Template.Spec.Containers[0].Image || ic[0].SecurityContext == nil ||
		!slices.Equal(ic[0].SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(ic[0].SecurityContext.Capabilities.Add) != 0 {
		t.Errorf("init containers %+v, want check-nri running meshlet enable-nri without capabilities", ic)
	} else {
		envs, mounts := map[string]string{}, map[string]string{}
		for _, e := range ic[0].Env {
			envs[e.Name] = e.Value
		}
		for _, m := range ic[0].VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		if envs["MESHLET_NRI_SOCKET"] != "/var/run/nri/nri.sock" || envs["MESHLET_CRI_SOCKET"] != "/run/containerd/containerd.sock" ||
			mounts["nri"] != "/var/run/nri" || mounts["cri"] != "/run/containerd" || len(mounts) != 2 {
			t.Errorf("check-nri env %v, mounts %v: want the runtime's NRI and CRI sockets, mounted", envs, mounts)
		}
	}

	// The runtime validator's toleration annotation is the runtime's key.
	for value, want := range map[string]map[string]string{
		"example.com/nri-optional": {"example.com/nri-optional": "true"},
		"":                         {},
	} {
		ds = only[*appsv1.DaemonSet](t, render(t, "--set", "tolerateMissingPluginsAnnotation="+value+",metrics.podAnnotations=false"))
		if a := ds.Spec.Template.Annotations; len(a) != len(want) || (len(want) > 0 && a[value] != "true") {
			t.Errorf("tolerateMissingPluginsAnnotation=%q: annotations %v, want %v", value, a, want)
		}
	}
}

// draResources are what the ClusterRole grants for DRA only.
var draResources = []string{"resourceslices", "resourceclaims", "runtimeclasses", "resourceclaims/status", "resourceclaims/driver"}

func ruleFor(role *rbacv1.ClusterRole, resource string) *rbacv1.PolicyRule {
	for i, r := range role.Rules {
		if slices.Contains(r.Resources, resource) {
			return &role.Rules[i]
		}
	}
	return nil
}

// TestChartDRA: dra.enabled brings the DeviceClass, the slice policy and its
// binding, the RBAC rules for slices and claims, the kubelet plugin mounts
// and --dra; dra.driverName is the driver everywhere it appears.
func TestChartDRA(t *testing.T) {
	objs := render(t, "--set", "dra.enabled=false", "--set", "nodeReadiness.mode=off")
	// The pods and nodes policies stay: they narrow pods/status and nodes,
	// which meshlet patches (the nodes' taints, with nodeReadiness off, only
	// a taint an earlier mode left).
	if got, want := kinds(objs), []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"}; !slices.Equal(got, want) {
		t.Errorf("dra.enabled=false: kinds %v, want %v", got, want)
	}
	role := only[*rbacv1.ClusterRole](t, objs)
	for _, r := range draResources {
		if ruleFor(role, r) != nil {
			t.Errorf("dra.enabled=false: the ClusterRole still grants %s", r)
		}
	}
	// nodes: a stopping meshlet matches its node against the DaemonSet's
	// node selector, DRA or not.
	for _, r := range []string{"pods", "namespaces", "pods/status", "events", "daemonsets", "nodes"} {
		if ruleFor(role, r) == nil {
			t.Errorf("dra.enabled=false: no rule for %s", r)
		}
	}
	ds := only[*appsv1.DaemonSet](t, objs)
	if cfg := daemonReads(t, ds); cfg.DRA.Enabled {
		t.Error("dra.enabled=false: the daemon's --dra is still true")
	}
	if v := volumePaths(ds); v["kubelet-plugins"] != "" || v["kubelet-registry"] != "" {
		t.Errorf("dra.enabled=false: kubelet plugin volumes %v", v)
	}

	const driver = "mesh.example.com"
	out, err := helm(t).Template(context.Background(), "--set", "dra.driverName="+driver)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "mesh.meshlet.dev") {
		t.Errorf("dra.driverName=%s: the default driver name is still rendered:\n%s", driver, grepLines(out, "mesh.meshlet.dev"))
	}
	objs = slices.DeleteFunc(decodeAll(t, "dra.driverName", out), isHook)
	class := only[*resourcev1.DeviceClass](t, objs)
	if class.Name != driver || class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != driver+"/mesh" ||
		len(class.Spec.Selectors) != 1 || class.Spec.Selectors[0].CEL.Expression != `device.driver == "`+driver+`"` {
		t.Errorf("DeviceClass %+v, want name, selector and extended resource of %s", class, driver)
	}
	vap := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, "meshlet-resourceslices")
	last := vap.Spec.Validations[len(vap.Spec.Validations)-1]
	if last.Expression != `variables.slice.spec.driver == "`+driver+`"` || !strings.Contains(last.MessageExpression, driver) {
		t.Errorf("the policy's driver check %+v, want %s", last, driver)
	}
	if r := ruleFor(only[*rbacv1.ClusterRole](t, objs), "resourceclaims/driver"); r == nil || !slices.Equal(r.ResourceNames, []string{driver}) {
		t.Errorf("resourceclaims/driver rule %+v, want resourceNames [%s]", r, driver)
	}
	if cfg := daemonReads(t, only[*appsv1.DaemonSet](t, objs)); !cfg.DRA.Enabled || cfg.DRA.DriverName != driver {
		t.Errorf("the daemon's --dra %v --dra-driver-name %q, want true, %s", cfg.DRA.Enabled, cfg.DRA.DriverName, driver)
	}

	// The policies name the release's service account, which is the
	// DaemonSet's and the binding's subject.
	objs = render(t, "--namespace", "mesh", "--set", "fullnameOverride=node-agent")
	binding := only[*rbacv1.ClusterRoleBinding](t, objs)
	ds = only[*appsv1.DaemonSet](t, objs)
	for _, name := range []string{"node-agent-resourceslices", "node-agent-pods"} {
		vap = named[*admissionv1.ValidatingAdmissionPolicy](t, objs, name)
		if want := `request.userInfo.username == "system:serviceaccount:mesh:node-agent"`; vap.Spec.MatchConditions[0].Expression != want {
			t.Errorf("policy %s match condition %q, want %q", name, vap.Spec.MatchConditions[0].Expression, want)
		}
	}
	if s := binding.Subjects[0]; s.Name != "node-agent" || s.Namespace != "mesh" || ds.Spec.Template.Spec.ServiceAccountName != "node-agent" || ds.Namespace != "mesh" {
		t.Errorf("binding subject %+v, DaemonSet %s/%s with %s", s, ds.Namespace, ds.Name, ds.Spec.Template.Spec.ServiceAccountName)
	}
	for _, name := range []string{"node-agent-resourceslices", "node-agent-pods"} {
		if b := named[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, name); b.Spec.PolicyName != name {
			t.Errorf("policy binding %s names %q, the policy is %q", name, b.Spec.PolicyName, name)
		}
	}
}

func grepLines(out []byte, s string) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, s) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestChartOptionalObjects: the namespace, the metrics Service and the
// ServiceMonitor are rendered only when asked for, and the ServiceMonitor
// selects the Service, which selects meshlet's pods.
func TestChartOptionalObjects(t *testing.T) {
	objs := render(t, "--set", "namespace.create=true")
	if ns := only[*corev1.Namespace](t, objs); ns.Name != helmchart.Namespace {
		t.Errorf("Namespace %s, want the release's, %s", ns.Name, helmchart.Namespace)
	}

	objs = render(t, "--set", "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.interval=15s", "--set", "metrics.serviceMonitor.labels.release=prom")
	svc := only[*corev1.Service](t, objs)
	ds := only[*appsv1.DaemonSet](t, objs)
	var sm *helmchart.ServiceMonitor
	for _, o := range objs {
		if o.Monitor != nil {
			sm = o.Monitor
		}
	}
	if sm == nil {
		t.Fatal("no ServiceMonitor")
	}
	// The pod declares no ports (see TestChartDaemonSet): the Service
	// targets the metrics address's port by number.
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != 9881 ||
		svc.Spec.Ports[0].Port != 9881 || svc.Spec.Ports[0].Name != "metrics" {
		t.Errorf("Service %+v, want headless, port metrics 9881", svc.Spec)
	}
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, meshlet's pods have %v", k, v, ds.Spec.Template.Labels)
		}
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, the Service has %v", k, v, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Interval != "15s" ||
		!slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{helmchart.Namespace}) || sm.Labels["release"] != "prom" {
		t.Errorf("ServiceMonitor %+v", sm)
	}
}

// cluster-scoped kinds among the manifests.
var clusterScoped = map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"DeviceClass": true, "ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true}

// TestKubectlApplyOrder: `kubectl apply -f deploy/` works on a fresh
// cluster. kubectl reads a directory's .json, .yaml and .yml files (not
// its subdirectories) in lexical order (cli-runtime's
// ExpandPathsToFileVisitors walks it with filepath.Walk) and applies their
// objects in that order without reordering them, so every namespaced
// object must name a namespace that an earlier object creates.
func TestKubectlApplyOrder(t *testing.T) {
	deploy := filepath.Join(root, "deploy")
	entries, err := os.ReadDir(deploy) // sorted by name, as filepath.Walk visits
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{}
	n := 0
	for _, e := range entries {
		if e.IsDir() || !slices.Contains([]string{".json", ".yaml", ".yml"}, filepath.Ext(e.Name())) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(deploy, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeAll(t, e.Name(), data) {
			n++
			switch {
			case o.Kind == "Namespace":
				created[o.Name] = true
			case clusterScoped[o.Kind]:
			case o.Namespace == "":
				t.Errorf("%s: %s %s names no namespace: kubectl would put it in the current context's", e.Name(), o.Kind, o.Name)
			case !created[o.Namespace]:
				t.Errorf("%s: %s %s is applied before its namespace %s exists", e.Name(), o.Kind, o.Name, o.Namespace)
			}
		}
	}
	if n == 0 || !created[helmchart.Namespace] {
		t.Fatalf("%d objects in deploy/, namespaces created %v: want meshlet's, %s", n, created, helmchart.Namespace)
	}
}

// TestSocketDirsMountedOnce: sockets that share a directory on the node
// (here the runtime's NRI and CRI sockets) get one mount of it: Kubernetes
// refuses two mounts at one path.
func TestSocketDirsMountedOnce(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, render(t, "--set", "paths.nriSocket=/run/runtime/nri.sock", "--set", "paths.criSocket=/run/runtime/cri.sock"))
	mounts := map[string]int{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath]++
	}
	if mounts["/run/runtime"] != 1 {
		t.Fatalf("mounts of /run/runtime: %d, want 1 (mounts: %v)", mounts["/run/runtime"], mounts)
	}
	for path, n := range mounts {
		if n > 1 {
			t.Fatalf("%s mounted %d times", path, n)
		}
	}
}

// TestChartNodeSettings: the chart's NodeSettings ConfigMap holds a
// document meshlet accepts; meshlet reads it first, then the extra ones
// (MESHLET_CONFIG_MAP), and may read exactly those (RBAC resourceNames);
// without any, none of it is rendered.
func TestChartNodeSettings(t *testing.T) {
	objs := renderValues(t, `
nodeSettings:
  settings:
    dnsCapture: false
    excludedNamespaces: [kube-system, batch]
    enrollTimeout: 900ms
    enablementSelectors:
    - podSelector: {matchLabels: {team: payments}}
  extraConfigMaps: [platform/mesh-overrides]
`)
	cm := only[*corev1.ConfigMap](t, objs)
	if cm.Name != "meshlet-settings" || cm.Namespace != "meshlet-system" {
		t.Fatalf("ConfigMap %s/%s, want meshlet-system/meshlet-settings", cm.Namespace, cm.Name)
	}
	keys := slices.Sorted(maps.Keys(cm.Data))
	doc, err := nodesettings.Decode(cm.Data, keys)
	if err != nil {
		t.Fatalf("the chart's document: %v\n%s", err, cm.Data[nodesettings.DataKey])
	}
	if got := doc.Settings(); !slices.Equal(got, []string{"dnsCapture", "enablementSelectors", "enrollTimeout", "excludedNamespaces"}) {
		t.Errorf("the chart's document gives %v", got)
	}
	ds := only[*appsv1.DaemonSet](t, objs)
	if got := envValue(ds, "MESHLET_CONFIG_MAP"); got != "meshlet-system/meshlet-settings,platform/mesh-overrides" {
		t.Errorf("MESHLET_CONFIG_MAP=%q", got)
	}
	rule := ruleFor(only[*rbacv1.ClusterRole](t, objs), "configmaps")
	if rule == nil || !slices.Equal(rule.ResourceNames, []string{"meshlet-settings", "mesh-overrides"}) ||
		!slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
		t.Errorf("configmaps rule %+v, want get/list/watch on the two names", rule)
	}

	objs = render(t, "--set", "nodeSettings.create=false")
	if slices.Contains(kinds(objs), "ConfigMap") || envValue(only[*appsv1.DaemonSet](t, objs), "MESHLET_CONFIG_MAP") != "" ||
		ruleFor(only[*rbacv1.ClusterRole](t, objs), "configmaps") != nil {
		t.Error("nodeSettings.create=false, no extra ConfigMaps: want no ConfigMap, no MESHLET_CONFIG_MAP and no configmaps rule")
	}
	if _, err := helm(t).Template(context.Background(), "--set", "nodeSettings.settings.dnsCaptur=false"); err == nil || !strings.Contains(err.Error(), "dnsCaptur") {
		t.Errorf("a misspelt setting: %v, want the schema to refuse it by name", err)
	}

	// A standalone meshlet reads no ConfigMaps (it refuses --config-map):
	// the chart's default values start it.
	ds = only[*appsv1.DaemonSet](t, render(t, "--set", "config.standalone=true"))
	if got := envValue(ds, "MESHLET_CONFIG_MAP"); got != "" {
		t.Errorf("config.standalone=true: MESHLET_CONFIG_MAP=%q, want none", got)
	}
	cfg := daemonReads(t, ds)
	cfg.StateDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Errorf("config.standalone=true: the daemon refuses the chart's configuration: %v", err)
	}
	if _, err := helm(t).Template(context.Background(), "--set", "config.standalone=true", "--set", "nodeSettings.extraConfigMaps={platform/overrides}"); err == nil ||
		!strings.Contains(err.Error(), "nodeSettings.extraConfigMaps") || !strings.Contains(err.Error(), "config.standalone") {
		t.Errorf("config.standalone with extra ConfigMaps: %v, want an error naming both", err)
	}
}

// envValue is the value of the DaemonSet's meshlet container's variable
// name ("" when unset).
func envValue(ds *appsv1.DaemonSet, name string) string {
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// A release for one Istio revision: the rule to read the revision tags
// (MutatingWebhookConfigurations, list and watch) is there only then, and
// the DRA plugin, one per node, is refused with it.
func TestChartRevision(t *testing.T) {
	objs := render(t, "--set", "config.revision=canary", "--set", "dra.enabled=false")
	cfg := daemonReads(t, only[*appsv1.DaemonSet](t, objs))
	cfg.StateDir = t.TempDir()
	if err := cfg.Validate(); err != nil || cfg.Policy.Revision != "canary" {
		t.Errorf("the daemon reads revision %q from the release: %v", cfg.Policy.Revision, err)
	}
	rule := ruleFor(only[*rbacv1.ClusterRole](t, objs), "mutatingwebhookconfigurations")
	if rule == nil || !slices.Equal(rule.APIGroups, []string{"admissionregistration.k8s.io"}) || !slices.Equal(rule.Verbs, []string{"list", "watch"}) || len(rule.ResourceNames) != 0 {
		t.Errorf("mutatingwebhookconfigurations rule %+v, want list and watch", rule)
	}
	if ruleFor(only[*rbacv1.ClusterRole](t, render(t)), "mutatingwebhookconfigurations") != nil {
		t.Error("without a revision: a mutatingwebhookconfigurations rule, want none")
	}
	if _, err := helm(t).Template(context.Background(), "--set", "config.revision=canary"); err == nil || !strings.Contains(err.Error(), "dra.enabled=false") {
		t.Errorf("a revision with DRA on: %v, want a refusal naming dra.enabled=false", err)
	}
	if _, err := helm(t).Template(context.Background(), "--set", "config.revision=Canary", "--set", "dra.enabled=false"); err == nil || !strings.Contains(err.Error(), "revision") {
		t.Errorf("revision Canary: %v, want the schema to refuse it", err)
	}
}

// TestChartNodeReadiness: nodeReadiness picks the taint on clusters whose
// admission can give pods outside the mesh its toleration (>= 1.36) and
// nothing elsewhere, with a revision or standalone; each mode brings its
// flag; meshlet may patch its node's taint and condition (narrowed by the
// nodes policy) in every mode, so that an update can take a taint off,
// but not with a revision or standalone, which never do; a mode that
// cannot work is refused with the value to change.
func TestChartNodeReadiness(t *testing.T) {
	role := func(objs []object) *rbacv1.ClusterRole { return only[*rbacv1.ClusterRole](t, objs) }
	policyNamed := func(objs []object, name string) bool {
		return slices.ContainsFunc(objs, func(o object) bool { return o.Name == name })
	}
	writes := func(what string, objs []object, want bool) {
		t.Helper()
		nodes, status := ruleFor(role(objs), "nodes"), ruleFor(role(objs), "nodes/status")
		wantVerbs := []string{"get"}
		if want {
			wantVerbs = []string{"get", "list", "watch", "patch"}
		}
		if nodes == nil || !slices.Equal(nodes.Verbs, wantVerbs) || (status != nil) != want || policyNamed(objs, "meshlet-nodes") != want {
			t.Errorf("%s: nodes rule %+v, nodes/status rule %+v, nodes policy %v; want writes %v", what, nodes, status, policyNamed(objs, "meshlet-nodes"), want)
		}
	}

	objs := render(t)
	ds := only[*appsv1.DaemonSet](t, objs)
	if got := envValue(ds, "MESHLET_NODE_TAINT"); got != "mesh.meshlet.dev/not-ready" {
		t.Errorf("default on helm template's Kubernetes: MESHLET_NODE_TAINT=%q, want the driver's not-ready key", got)
	}
	writes("taint", objs, true)
	if !policyNamed(objs, "meshlet-tolerate-outside-mesh") {
		t.Error("taint: want the toleration policy")
	}
	hooks := renderHooks(t)
	job := only[*batchv1.Job](t, hooks)
	if got := job.Spec.Template.Spec.Containers[0].Command; !slices.Equal(got, []string{"/usr/local/bin/meshlet", "release-nodes",
		"--node-taint=mesh.meshlet.dev/not-ready", "meshlet-system/meshlet"}) {
		t.Errorf("the pre-delete job's command %q", got)
	}
	for mode, want := range map[string][]string{
		"condition": {"--node-condition=mesh.meshlet.dev/MeshReady"},
		"off":       {"--node-taint=mesh.meshlet.dev/not-ready", "--node-condition=mesh.meshlet.dev/MeshReady"},
	} {
		job := only[*batchv1.Job](t, renderHooks(t, "--set", "nodeReadiness.mode="+mode))
		if got := job.Spec.Template.Spec.Containers[0].Command; !slices.Equal(got[2:len(got)-1], want) {
			t.Errorf("mode %s: the pre-delete job's command %q, want flags %q", mode, got, want)
		}
	}
	if job.Annotations["helm.sh/hook"] != "pre-delete" || len(hooks) != 6 {
		t.Errorf("want a pre-delete job with its account and RBAC (6 hooks), got %v", kinds(hooks))
	}

	for _, c := range []struct {
		what   string
		args   []string
		writes bool
	}{
		{"Kubernetes 1.35", []string{"--kube-version", "1.35.0"}, true},
		{"mode off", []string{"--set", "nodeReadiness.mode=off"}, true},
		{"a revision", []string{"--set", "config.revision=canary", "--set", "dra.enabled=false"}, false},
		{"standalone", []string{"--set", "config.standalone=true"}, false},
	} {
		objs := render(t, c.args...)
		ds := only[*appsv1.DaemonSet](t, objs)
		if envValue(ds, "MESHLET_NODE_TAINT") != "" || envValue(ds, "MESHLET_NODE_CONDITION") != "" || policyNamed(objs, "meshlet-tolerate-outside-mesh") {
			t.Errorf("%s: want no node taint, condition or toleration policy", c.what)
		}
		writes(c.what, objs, c.writes)
		if got := len(renderHooks(t, c.args...)); (got > 0) != c.writes {
			t.Errorf("%s: %d hooks, want the pre-delete job %v", c.what, got, c.writes)
		}
	}

	objs = render(t, "--set", "nodeReadiness.mode=condition", "--set", "dra.driverName=mesh.example.com")
	ds = only[*appsv1.DaemonSet](t, objs)
	if got := envValue(ds, "MESHLET_NODE_CONDITION"); got != "mesh.example.com/MeshReady" || envValue(ds, "MESHLET_NODE_TAINT") != "" {
		t.Errorf("condition: MESHLET_NODE_CONDITION=%q and no taint, want mesh.example.com/MeshReady", got)
	}
	writes("condition", objs, true)
	vap := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, "meshlet-nodes")
	if got := vap.Spec.Variables[1].Expression; !strings.Contains(got, `t.key != "mesh.example.com/not-ready"`) {
		t.Errorf("the policy does not name the taint: %s", got)
	}
	if got := vap.Spec.Variables[3].Expression; !strings.Contains(got, `c.type != "mesh.example.com/MeshReady"`) {
		t.Errorf("the policy does not name the condition: %s", got)
	}
	// The Node Readiness Controller's rule, where its API is served.
	out, err := helm(t).Template(context.Background(), "--set", "nodeReadiness.mode=condition", "--api-versions", "readiness.node.x-k8s.io/v1alpha1",
		"--show-only", "templates/nodereadiness.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: NodeReadinessRule", `type: "mesh.meshlet.dev/MeshReady"`, `requiredStatus: "True"`, `key: "mesh.meshlet.dev/not-ready"`,
		"enforcementMode: continuous", "kubernetes.io/os: linux"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("NodeReadinessRule: %q missing in\n%s", want, out)
		}
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--set", "nodeReadiness.mode=taint", "--kube-version", "1.35.0"}, []string{"nodeReadiness.tolerateOutsideMesh", "1.36"}},
		{[]string{"--set", "nodeReadiness.mode=taint", "--set", "config.standalone=true"}, []string{"nodeReadiness.mode=taint", "config.standalone"}},
		{[]string{"--set", "nodeReadiness.mode=sometimes"}, []string{"nodeReadiness.mode"}},
		{[]string{"--set", "nodeReadiness.mode=taint", "--set", "config.revision=canary", "--set", "dra.enabled=false"}, []string{"nodeReadiness.mode=taint", "config.revision"}},
		{[]string{"--set", "nodeReadiness.taintKey=not a key"}, []string{"nodeReadiness.taintKey"}},
	} {
		_, err := helm(t).Template(context.Background(), c.args...)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("helm template %s: %v, want an error naming %q", strings.Join(c.args, " "), err, w)
			}
		}
	}
	// taint on an older cluster works when pods are given the toleration
	// otherwise.
	objs = render(t, "--set", "nodeReadiness.mode=taint", "--set", "nodeReadiness.tolerateOutsideMesh=false", "--kube-version", "1.35.0")
	if len(renderHooks(t, "--set", "nodeReadiness.releaseOnUninstall=false")) != 0 {
		t.Error("nodeReadiness.releaseOnUninstall=false: want no pre-delete job")
	}
	if envValue(only[*appsv1.DaemonSet](t, objs), "MESHLET_NODE_TAINT") == "" || policyNamed(objs, "meshlet-tolerate-outside-mesh") {
		t.Error("taint without tolerateOutsideMesh on 1.35: want the taint and no toleration policy")
	}
}
