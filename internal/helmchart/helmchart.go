// Package helmchart renders meshlet's Helm chart (deploy/charts/meshlet)
// with a helm binary: the manifests deploy/ ships for `kubectl apply` and
// the chart's golden files are its output, and this package is the one
// place that says which values each is rendered with. `make manifests`
// writes them (hack/manifests); this package's tests render them again and
// fail when a committed file differs, and check the chart's behaviour and
// every object it renders (Decode).
package helmchart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	// ChartDir is the chart, relative to the repository's root.
	ChartDir = "deploy/charts/meshlet"
	// Release and Namespace are the release the shipped manifests are
	// rendered as: the objects' names and meshlet's namespace.
	Release   = "meshlet"
	Namespace = "meshlet-system"
	// HelmEnv names the directory holding the helm binary
	// (hack/install-helm.sh prints it).
	HelmEnv = "MESHLET_HELM"
)

// Platforms are the chart's kinds of cluster (values platform=...); ""
// is kubeadm-style nodes with containerd.
var Platforms = []string{"", "crio", "gke", "eks", "openshift", "kind", "k3d", "k3s", "microk8s", "minikube"}

// PlatformGolden is the name of a platform's golden file in the chart's
// testdata.
func PlatformGolden(platform string) string {
	if platform == "" {
		return "default"
	}
	return platform
}

// OlderCluster is the Kubernetes version the chart's golden file for a
// cluster without the DRA it needs is rendered for (no-dra.yaml).
const OlderCluster = "1.33.0"

// Helm runs one helm binary on the chart of the repository at Root.
type Helm struct {
	Bin  string // the helm executable
	Root string // the repository's root
}

// FromEnv is the helm in the directory HelmEnv names.
func FromEnv(root string) (Helm, error) {
	dir := os.Getenv(HelmEnv)
	if dir == "" {
		return Helm{}, fmt.Errorf("%s is not set: the directory hack/install-helm.sh prints", HelmEnv)
	}
	return Helm{Bin: filepath.Join(dir, "helm"), Root: root}, nil
}

// Template renders the chart as release Release in Namespace, with args
// (e.g. --set, -f, --show-only) after the chart. A failure carries helm's
// message, which names the value at fault.
func (h Helm) Template(ctx context.Context, args ...string) ([]byte, error) {
	return h.run(ctx, append([]string{"template", Release, filepath.Join(h.Root, ChartDir), "--namespace", Namespace}, args...)...)
}

// Lint runs helm lint --strict on the chart with args (e.g. --set).
func (h Helm) Lint(ctx context.Context, args ...string) ([]byte, error) {
	return h.run(ctx, append([]string{"lint", "--strict", filepath.Join(h.Root, ChartDir)}, args...)...)
}

func (h Helm) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// A File is one generated file: its path from the repository's root and
// the helm template arguments it is rendered with.
type File struct {
	Path string
	Args []string
}

// Files are every file `make manifests` writes. The deploy/ files are the
// default values split by kind of object, so that `kubectl apply -f
// deploy/` installs meshlet: kubectl applies a directory's files in
// lexical order and stops at nothing, so the namespace comes first
// (00-namespace.yaml) or the DaemonSet would find no namespace. They are
// rendered with DRA on, as for a cluster that serves it: the kubectl user
// picks the file. The golden files are the whole chart per platform, for
// helm template's Kubernetes release (DRA on), and once for a cluster
// older than DRA's (no-dra.yaml).
func Files() []File {
	fs := []File{
		{"deploy/00-namespace.yaml", []string{"--set", "namespace.create=true", "--show-only", "templates/namespace.yaml"}},
		{"deploy/rbac.yaml", []string{"--set", "dra.enabled=true", "--show-only", "templates/rbac.yaml"}},
		{"deploy/meshlet.yaml", []string{"--set", "dra.enabled=true", "--show-only", "templates/settings.yaml", "--show-only", "templates/daemonset.yaml"}},
		{"deploy/dra.yaml", []string{"--set", "dra.enabled=true", "--show-only", "templates/dra.yaml"}},
		{"deploy/nodereadiness.yaml", []string{"--set", "nodeReadiness.mode=taint", "--show-only", "templates/nodereadiness.yaml"}},
	}
	for _, p := range Platforms {
		fs = append(fs, File{ChartDir + "/testdata/" + PlatformGolden(p) + ".yaml", []string{"--set", "platform=" + p}})
	}
	fs = append(fs, File{ChartDir + "/testdata/no-dra.yaml", []string{"--kube-version", OlderCluster}})
	// meshlet's RBAC and policies with nodeReadiness.mode=condition, under
	// names of their own, for agent/kube's tests to apply beside
	// deploy/rbac.yaml on one API server.
	return append(fs, File{ChartDir + "/testdata/" + ConditionRBAC + ".yaml", []string{"--set", "nodeReadiness.mode=condition",
		"--set", "fullnameOverride=" + ConditionRBAC, "--show-only", "templates/rbac.yaml"}})
}

// ConditionRBAC names the release-wide objects of the chart's RBAC
// rendered with nodeReadiness.mode=condition (its service account among
// them), and the golden file that holds them.
const ConditionRBAC = "meshlet-condition"

// Render renders f with its header: what it is generated from and how to
// regenerate it.
func (h Helm) Render(ctx context.Context, f File) ([]byte, error) {
	out, err := h.Template(ctx, f.Args...)
	if err != nil {
		return nil, err
	}
	// helm starts every document with "---"; the header takes the first
	// one's place, so the file's first document is a real object (tools
	// that split files on "\n---\n" see no empty document).
	body, ok := bytes.CutPrefix(out, []byte("---\n"))
	if !ok {
		return nil, fmt.Errorf("%s: helm template output does not start with a document separator", f.Path)
	}
	cmd := "helm template " + Release + " " + ChartDir + " --namespace " + Namespace
	if len(f.Args) > 0 {
		cmd += " " + strings.Join(f.Args, " ")
	}
	header := "# Generated from the Helm chart " + ChartDir + " by `make manifests`\n" +
		"# (" + cmd + ").\n" +
		"# Do not edit: change the chart and run `make manifests`.\n"
	return append([]byte(header), body...), nil
}

// Generate renders every file of Files, by path.
func (h Helm) Generate(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	var errs []error
	for _, f := range Files() {
		b, err := h.Render(ctx, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[f.Path] = b
	}
	return out, errors.Join(errs...)
}

// An Object is one rendered document, decoded strictly.
type Object struct {
	Kind, Name, Namespace string
	// Obj is the object as its Kubernetes API type; nil for a kind that
	// client-go does not know (the ServiceMonitor: Monitor; the
	// PrometheusRule: Rule).
	Obj     runtime.Object
	Monitor *ServiceMonitor
	Rule    *PrometheusRule
	// Raw is the document as rendered.
	Raw []byte
}

// strict decodes with the Kubernetes API types and refuses unknown and
// duplicate fields: a misspelt or misplaced field in a template is an
// error here instead of a field the API server silently drops. This is the
// schema check of the rendered manifests: the API's own Go types, no JSON
// schemas downloaded at check time.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// ServiceMonitor is monitoring.coreos.com/v1 ServiceMonitor with the fields
// the chart renders (names from the Prometheus Operator's API reference),
// decoded strictly so that a field the chart renders and this does not
// know fails. Not the operator's own Go types: that module would raise this
// module's Kubernetes dependencies for one optional object.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port              string          `json:"port"`
			Path              string          `json:"path"`
			Interval          string          `json:"interval,omitempty"`
			ScrapeTimeout     string          `json:"scrapeTimeout,omitempty"`
			Relabelings       []RelabelConfig `json:"relabelings"`
			MetricRelabelings []RelabelConfig `json:"metricRelabelings,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// RelabelConfig is the Prometheus Operator's RelabelConfig (an endpoint's
// relabelings and metricRelabelings).
type RelabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// PrometheusRule is monitoring.coreos.com/v1 PrometheusRule with the
// fields of its API reference the chart may render, decoded strictly like
// ServiceMonitor.
type PrometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []RuleGroup `json:"groups"`
	} `json:"spec"`
}

// RuleGroup is one group of a PrometheusRule.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting (Alert) or recording (Record) rule.
type Rule struct {
	Alert         string            `json:"alert,omitempty"`
	Record        string            `json:"record,omitempty"`
	Expr          string            `json:"expr"`
	For           string            `json:"for,omitempty"`
	KeepFiringFor string            `json:"keep_firing_for,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Decode splits a multi-document YAML stream (helm template's output, a
// manifest file) and decodes every object strictly. Documents of comments
// only are skipped.
func Decode(data []byte) ([]Object, error) {
	var out []Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if tm.Kind == "" {
			if j, err := yaml.YAMLToJSON(doc); err == nil && string(j) == "null" {
				continue
			}
			return nil, fmt.Errorf("document %d has no kind:\n%s", i, doc)
		}
		o := Object{Kind: tm.Kind, Raw: doc}
		if tm.Kind == "ServiceMonitor" {
			if tm.APIVersion != "monitoring.coreos.com/v1" {
				return nil, fmt.Errorf("document %d: ServiceMonitor of %s, want monitoring.coreos.com/v1", i, tm.APIVersion)
			}
			o.Monitor = &ServiceMonitor{}
			if err := yaml.UnmarshalStrict(doc, o.Monitor); err != nil {
				return nil, fmt.Errorf("document %d: ServiceMonitor: %w", i, err)
			}
			o.Name, o.Namespace = o.Monitor.Name, o.Monitor.Namespace
		} else if tm.Kind == "PrometheusRule" {
			if tm.APIVersion != "monitoring.coreos.com/v1" {
				return nil, fmt.Errorf("document %d: PrometheusRule of %s, want monitoring.coreos.com/v1", i, tm.APIVersion)
			}
			o.Rule = &PrometheusRule{}
			if err := yaml.UnmarshalStrict(doc, o.Rule); err != nil {
				return nil, fmt.Errorf("document %d: PrometheusRule: %w", i, err)
			}
			o.Name, o.Namespace = o.Rule.Name, o.Rule.Namespace
		} else {
			obj, _, err := strict.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("document %d: %s: %w", i, tm.Kind, err)
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return nil, fmt.Errorf("document %d: %s: %w", i, tm.Kind, err)
			}
			o.Obj, o.Name, o.Namespace = obj, m.GetName(), m.GetNamespace()
		}
		out = append(out, o)
	}
}
