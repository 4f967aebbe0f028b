package kubectlmeshlet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultSelector selects the chart's DaemonSet (its
// app.kubernetes.io/name label, meshlet unless nameOverride is set).
const DefaultSelector = "app.kubernetes.io/name=meshlet"

// ContainerName is meshlet's container in the chart's DaemonSet.
const ContainerName = "meshlet"

// MeshletCommand is the meshlet binary in its image (the path the chart's
// probes run).
const MeshletCommand = "/usr/local/bin/meshlet"

// statusCommandLine is what each node's meshlet is asked: its report
// (agent/nodestatus.Report) with every pod.
var statusCommandLine = []string{MeshletCommand, "status", "-o", "json", "--all"}

// cluster is the API server kubectl-meshlet asks, and where meshlet runs.
type cluster struct {
	client kubernetes.Interface
	exec   podExec
	// namespace is meshlet's (-n), "" for every namespace.
	namespace string
	selector  string
}

// connect loads the kubeconfig as kubectl does (--kubeconfig, else
// $KUBECONFIG, else ~/.kube/config; --context).
func connect(_ context.Context, g globalFlags) (*cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.context})
	config, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", config.Host, err)
	}
	return &cluster{client: client, exec: apiExec{config: config, client: client}, namespace: g.namespace, selector: g.selector}, nil
}

// meshlet is meshlet's DaemonSets in the cluster and their pods.
type meshlet struct {
	DaemonSets []appsv1.DaemonSet
	// Pods are the DaemonSets' pods, by node then name.
	Pods []corev1.Pod
}

// errNoMeshlet is findMeshlet's error when no DaemonSet matches.
var errNoMeshlet = errors.New("no meshlet DaemonSet found")

// findMeshlet finds meshlet's DaemonSets (in -n's namespace, else in every
// namespace, by selector) and their pods.
func (c *cluster) findMeshlet(ctx context.Context) (*meshlet, error) {
	list, err := c.client.AppsV1().DaemonSets(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: c.selector})
	if err != nil {
		return nil, fmt.Errorf("list DaemonSets %s: %w", c.where(), err)
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("%w %s (is meshlet installed? -n names its namespace, -l its label)", errNoMeshlet, c.where())
	}
	m := &meshlet{DaemonSets: list.Items}
	for _, ds := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("DaemonSet %s/%s's selector: %w", ds.Namespace, ds.Name, err)
		}
		pods, err := c.client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("list DaemonSet %s/%s's pods: %w", ds.Namespace, ds.Name, err)
		}
		for _, p := range pods.Items {
			if ownedBy(&p, &ds) {
				m.Pods = append(m.Pods, p)
			}
		}
	}
	slices.SortFunc(m.Pods, func(a, b corev1.Pod) int {
		return strings.Compare(a.Spec.NodeName+"/"+a.Namespace+"/"+a.Name, b.Spec.NodeName+"/"+b.Namespace+"/"+b.Name)
	})
	return m, nil
}

func (c *cluster) where() string {
	if c.namespace == "" {
		return fmt.Sprintf("matching %s in any namespace", c.selector)
	}
	return fmt.Sprintf("matching %s in namespace %s", c.selector, c.namespace)
}

// ownedBy reports whether p is ds's pod (another release's pods may share
// its labels).
func ownedBy(p *corev1.Pod, ds *appsv1.DaemonSet) bool {
	return slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool {
		return o.UID == ds.UID || (ds.UID == "" && o.Kind == "DaemonSet" && o.Name == ds.Name)
	})
}

// daemonSetOf is the DaemonSet that owns p.
func (m *meshlet) daemonSetOf(p *corev1.Pod) *appsv1.DaemonSet {
	for i := range m.DaemonSets {
		if ownedBy(p, &m.DaemonSets[i]) {
			return &m.DaemonSets[i]
		}
	}
	return nil
}

// meshletContainer is the pod's (or template's) meshlet container, the
// first one when none is named meshlet.
func meshletContainer(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == ContainerName {
			return &spec.Containers[i]
		}
	}
	if len(spec.Containers) > 0 {
		return &spec.Containers[0]
	}
	return nil
}

// containerStatus is the status of the pod's container name.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// notRunning says why meshlet cannot be asked in p ("" when it can).
func notRunning(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "pod terminating"
	}
	if p.Status.Phase != corev1.PodRunning {
		why := "pod " + string(p.Status.Phase)
		if p.Status.Phase == "" {
			why = "pod not started"
		}
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				return fmt.Sprintf("%s: %s %s", why, cs.Name, w.Reason)
			}
		}
		if p.Spec.NodeName == "" {
			return why + ": not scheduled"
		}
		return why
	}
	c := meshletContainer(&p.Spec)
	if c == nil {
		return "pod has no containers"
	}
	cs := containerStatus(p, c.Name)
	if cs == nil || cs.State.Running == nil {
		if cs != nil && cs.State.Waiting != nil {
			return fmt.Sprintf("container %s %s", c.Name, cs.State.Waiting.Reason)
		}
		return fmt.Sprintf("container %s not running", c.Name)
	}
	return ""
}
