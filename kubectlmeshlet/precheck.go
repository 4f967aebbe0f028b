package kubectlmeshlet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

var precheckCommand = command{
	name:    "precheck",
	summary: "checks a cluster for meshlet, before or after installing it; exit status 1 on a FAIL",
	help: `precheck prints a PASS, WARN or FAIL line for each check:
  kubernetes   the server's version (1.34 and later) and whether it serves resource.k8s.io/v1 (DRA)
  nri          each node's runtime hook: NRI connected (PASS), CNI mode (WARN), else what the
               node's runtime needs for NRI (containerd 2.x has it on, 1.7 and CRI-O off)
  pod-security meshlet's namespace's enforced Pod Security level (privileged or none)
  quota        ResourceQuotas in meshlet's namespace that may refuse its pods
  ztunnel      a ztunnel DaemonSet, pods labelled app=ztunnel, or ztunnel connected to meshlet
  istio-cni    istio-cni's node agent, which meshlet takes nodes over from
Before an install (no meshlet DaemonSet found) meshlet's namespace is -n's, else
meshlet-system, and each node's NRI is told from its runtime's version.

Exit status: 1 when a check FAILs, else 0.`,
	flags: func(fs *pflag.FlagSet) runFunc {
		var output string
		fs.StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
		return runFunc{check: func() error { return checkOutput(output) }, run: func(ctx context.Context, c *cluster, w io.Writer) (int, error) {
			in, err := gatherPrecheck(ctx, c)
			if err != nil {
				return ExitError, err
			}
			checks := precheckRules(in)
			if output == "table" {
				printChecks(w, checks)
			} else if err := printObject(w, output, checks); err != nil {
				return ExitError, err
			}
			if slices.ContainsFunc(checks, func(c Check) bool { return c.Result == Fail }) {
				return ExitFindings, nil
			}
			return ExitOK, nil
		}}
	},
}

// Check results.
const (
	Pass = "PASS"
	Warn = "WARN"
	Fail = "FAIL"
)

// Check is one precheck line.
type Check struct {
	Result  string `json:"result"`
	Check   string `json:"check"`
	Message string `json:"message"`
}

// DefaultNamespace is where the docs install meshlet: precheck looks there
// before an install, without -n.
const DefaultNamespace = "meshlet-system"

// precheckInput is what the rules look at, read from the cluster.
type precheckInput struct {
	ServerVersion *version.Info
	// DRAServed: the API serves resource.k8s.io/v1.
	DRAServed bool
	// Namespace is meshlet's namespace (NamespaceObj nil: it does not
	// exist).
	Namespace    string
	NamespaceObj *corev1.Namespace
	Quotas       []corev1.ResourceQuota
	// Meshlet is nil before an install.
	Meshlet *meshlet
	Reports []NodeReport
	Nodes   []corev1.Node
	// Ztunnels are DaemonSets named ztunnel or labelled app=ztunnel,
	// ZtunnelPods pods labelled app=ztunnel.
	Ztunnels    []appsv1.DaemonSet
	ZtunnelPods []corev1.Pod
	// IstioCNIs are istio-cni's node agent's DaemonSets, IstioCNIPods
	// their pods.
	IstioCNIs    []appsv1.DaemonSet
	IstioCNIPods []corev1.Pod
}

// gatherPrecheck reads what the checks need.
func gatherPrecheck(ctx context.Context, c *cluster) (precheckInput, error) {
	var in precheckInput
	var err error
	if in.ServerVersion, err = c.client.Discovery().ServerVersion(); err != nil {
		return in, fmt.Errorf("the API server's version: %w", err)
	}
	switch _, err := c.client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); {
	case err == nil:
		in.DRAServed = true
	case !apierrors.IsNotFound(err):
		return in, fmt.Errorf("discovery of resource.k8s.io/v1: %w", err)
	}
	in.Meshlet, err = c.findMeshlet(ctx)
	if errors.Is(err, errNoMeshlet) {
		in.Meshlet, err = nil, nil
	}
	if err != nil {
		return in, err
	}
	in.Namespace = c.namespace
	if in.Namespace == "" {
		in.Namespace = DefaultNamespace
		if in.Meshlet != nil {
			in.Namespace = in.Meshlet.DaemonSets[0].Namespace
		}
	}
	ns, err := c.client.CoreV1().Namespaces().Get(ctx, in.Namespace, metav1.GetOptions{})
	switch {
	case err == nil:
		in.NamespaceObj = ns
	case !apierrors.IsNotFound(err):
		return in, fmt.Errorf("namespace %s: %w", in.Namespace, err)
	}
	if in.NamespaceObj != nil {
		quotas, err := c.client.CoreV1().ResourceQuotas(in.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return in, fmt.Errorf("ResourceQuotas in %s: %w", in.Namespace, err)
		}
		in.Quotas = quotas.Items
	}
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	in.Nodes = nodes.Items
	if in.Meshlet != nil {
		in.Reports = collectReports(ctx, c.exec, in.Meshlet.Pods)
	}
	if in.Ztunnels, in.ZtunnelPods, err = findAgent(ctx, c, "ztunnel", "app=ztunnel"); err != nil {
		return in, err
	}
	if in.IstioCNIs, in.IstioCNIPods, err = findAgent(ctx, c, "istio-cni-node", "k8s-app=istio-cni-node"); err != nil {
		return in, err
	}
	return in, nil
}

// findAgent finds a node agent in any namespace: DaemonSets named name or
// labelled label, and pods labelled label.
func findAgent(ctx context.Context, c *cluster, name, label string) ([]appsv1.DaemonSet, []corev1.Pod, error) {
	dss, err := c.client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list DaemonSets: %w", err)
	}
	key, value, _ := strings.Cut(label, "=")
	var found []appsv1.DaemonSet
	for _, ds := range dss.Items {
		if ds.Name == name || ds.Labels[key] == value {
			found = append(found, ds)
		}
	}
	pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: label})
	if err != nil {
		return nil, nil, fmt.Errorf("list pods %s: %w", label, err)
	}
	return found, pods.Items, nil
}

// precheckRules are the checks, in order.
func precheckRules(in precheckInput) []Check {
	var checks []Check
	checks = append(checks, kubernetesChecks(in)...)
	checks = append(checks, nriChecks(in)...)
	checks = append(checks, podSecurityCheck(in), quotaCheck(in), ztunnelCheck(in), istioCNICheck(in))
	return checks
}

func printChecks(w io.Writer, checks []Check) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Result, c.Check, c.Message)
	}
	tw.Flush()
}
