package kubectlmeshlet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Kubernetes releases meshlet supports, and the one the chart turns the
// mesh device (DRA) on from (docs/migrating-from-istio-cni.md, "Versions";
// the chart's meshlet.dra).
const (
	minMinor = 34
	draMinor = 37
)

func kubernetesChecks(in precheckInput) []Check {
	v := in.ServerVersion
	major, _ := strconv.Atoi(strings.TrimRight(v.Major, "+"))
	minor, _ := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	var checks []Check
	if major > 1 || (major == 1 && minor >= minMinor) {
		checks = append(checks, Check{Pass, "kubernetes", fmt.Sprintf("%s: supported (1.%d and later)", v.GitVersion, minMinor)})
	} else {
		checks = append(checks, Check{Fail, "kubernetes", fmt.Sprintf("%s: meshlet needs 1.%d or later", v.GitVersion, minMinor)})
	}
	switch {
	case in.DRAServed && (major > 1 || minor >= draMinor):
		checks = append(checks, Check{Pass, "kubernetes", "resource.k8s.io/v1 served: pods can ask for the mesh device (DRA)"})
	case in.DRAServed:
		checks = append(checks, Check{Warn, "kubernetes", fmt.Sprintf("resource.k8s.io/v1 served, but the chart turns the mesh device on from 1.%d: pods are meshed by label only", draMinor)})
	default:
		checks = append(checks, Check{Warn, "kubernetes", "resource.k8s.io/v1 not served: no mesh device (DRA); pods are meshed by label only"})
	}
	return checks
}

// nriChecks is a line per node: its meshlet's runtime hook, or what its
// runtime needs for NRI when no meshlet answers there.
func nriChecks(in precheckInput) []Check {
	reports := map[string]NodeReport{}
	for _, nr := range in.Reports {
		// The serving meshlet's report wins over a standby's or a failed
		// exec's.
		if prev, ok := reports[nr.Node]; !ok || prev.Report == nil || (nr.Report != nil && nr.Report.Status != "STANDBY") {
			reports[nr.Node] = nr
		}
	}
	var checks []Check
	for _, n := range in.Nodes {
		name := "nri " + n.Name
		nr, ok := reports[n.Name]
		if ok && nr.Report != nil && nr.Report.Summary != nil {
			hook := nr.Report.Summary.RuntimeHook
			switch {
			case hook.Mode == "nri" && hook.Connected:
				checks = append(checks, Check{Pass, name, "NRI connected"})
			case hook.Mode == "nri":
				checks = append(checks, Check{Fail, name, "NRI not connected: " + orDash(oneLineText(hook.Detail))})
			case hook.Mode == "cni":
				checks = append(checks, Check{Warn, name, "NRI missing, CNI fallback in use (" + runtimeAdvice(n.Status.NodeInfo.ContainerRuntimeVersion) + ")"})
			default:
				checks = append(checks, Check{Warn, name, "meshlet has not picked a runtime hook yet: " + orDash(oneLineText(hook.Detail))})
			}
			continue
		}
		result, msg := runtimeNRI(n.Status.NodeInfo.ContainerRuntimeVersion)
		if ok {
			msg += " (meshlet not asked: " + oneLineText(nr.Error) + ")"
		} else if in.Meshlet != nil {
			msg += " (no meshlet pod on the node)"
		}
		checks = append(checks, Check{result, name, msg})
	}
	return checks
}

// runtimeNRI tells from a node's runtime (containerRuntimeVersion,
// e.g. containerd://2.1.4) whether it has NRI on, as deploy/README.md's
// runtime table says: containerd 2.x on by default; containerd 1.7 and
// CRI-O off until enabled; anything else has none, and meshlet runs there
// in CNI mode.
func runtimeNRI(runtimeVersion string) (result, message string) {
	name, ver, _ := strings.Cut(runtimeVersion, "://")
	switch {
	case name == "containerd" && majorOf(ver) >= 2:
		return Pass, fmt.Sprintf("containerd %s: NRI on by default", ver)
	default:
		return Warn, runtimeAdvice(runtimeVersion)
	}
}

// runtimeAdvice says what a node's runtime needs for NRI.
func runtimeAdvice(runtimeVersion string) string {
	name, ver, _ := strings.Cut(runtimeVersion, "://")
	switch {
	case name == "containerd" && majorOf(ver) >= 2:
		return fmt.Sprintf("containerd %s has NRI on by default: check its [plugins.'io.containerd.nri.v1.nri'] disable = false", ver)
	case name == "containerd" && strings.HasPrefix(ver, "1.7"):
		return fmt.Sprintf("containerd %s: NRI off by default; enable it with disable = false under [plugins.\"io.containerd.nri.v1.nri\"] (deploy/runtime/containerd-1.7.toml), else meshlet runs in CNI mode", ver)
	case name == "containerd":
		return fmt.Sprintf("containerd %s has no NRI: meshlet runs in CNI mode (containerd 1.7 and later have NRI)", ver)
	case name == "cri-o":
		return fmt.Sprintf("CRI-O %s: NRI must be enabled ([crio.nri] enable_nri = true, deploy/runtime/crio.conf), else meshlet runs in CNI mode", ver)
	case runtimeVersion == "":
		return "runtime unknown (the node reports none): meshlet uses NRI if it answers, else CNI mode"
	default:
		return fmt.Sprintf("%s has no NRI meshlet knows: meshlet runs in CNI mode", runtimeVersion)
	}
}

func majorOf(v string) int {
	major, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	n, _ := strconv.Atoi(major)
	return n
}

// podSecurityLabel is the Pod Security level a namespace enforces.
const podSecurityLabel = "pod-security.kubernetes.io/enforce"

func podSecurityCheck(in precheckInput) Check {
	const name = "pod-security"
	if in.NamespaceObj == nil {
		return Check{Pass, name, fmt.Sprintf("namespace %s does not exist yet: create it labelled %s=privileged where the cluster's default level is not privileged (deploy/README.md, \"Pod Security\")", in.Namespace, podSecurityLabel)}
	}
	switch level, ok := in.NamespaceObj.Labels[podSecurityLabel]; {
	case !ok:
		return Check{Pass, name, fmt.Sprintf("namespace %s enforces no level of its own: the cluster's default applies, which must be privileged", in.Namespace)}
	case level == "privileged":
		return Check{Pass, name, fmt.Sprintf("namespace %s enforces privileged", in.Namespace)}
	default:
		return Check{Fail, name, fmt.Sprintf("namespace %s enforces %s: meshlet's pods need privileged (kubectl label namespace %s %s=privileged --overwrite)",
			in.Namespace, level, in.Namespace, podSecurityLabel)}
	}
}

// chartQuota reports whether q is the one the chart renders
// (templates/resourcequota.yaml): it admits meshlet's critical pods.
func chartQuota(q *corev1.ResourceQuota, m *meshlet) bool {
	if m == nil || !strings.HasSuffix(q.Name, "-critical-pods") {
		return false
	}
	return slices.ContainsFunc(m.DaemonSets, func(ds appsv1.DaemonSet) bool {
		return ds.Namespace == q.Namespace && ds.Labels["app.kubernetes.io/instance"] != "" &&
			ds.Labels["app.kubernetes.io/instance"] == q.Labels["app.kubernetes.io/instance"]
	})
}

func quotaCheck(in precheckInput) Check {
	const name = "quota"
	var others, exhausted []string
	for i := range in.Quotas {
		q := &in.Quotas[i]
		if full := exhaustedResources(q); len(full) > 0 {
			exhausted = append(exhausted, fmt.Sprintf("%s (%s)", q.Name, strings.Join(full, ", ")))
		} else if !chartQuota(q, in.Meshlet) {
			others = append(others, fmt.Sprintf("%s (%s)", q.Name, hardLimits(q)))
		}
	}
	switch {
	case len(exhausted) > 0:
		return Check{Warn, name, fmt.Sprintf("ResourceQuota in %s used up: %s: meshlet's next pod (an update's surge, a new node) is refused", in.Namespace, strings.Join(exhausted, "; "))}
	case len(others) > 0:
		return Check{Warn, name, fmt.Sprintf("ResourceQuota in %s not the chart's: %s: it may refuse meshlet's pods", in.Namespace, strings.Join(others, "; "))}
	default:
		return Check{Pass, name, fmt.Sprintf("no ResourceQuota in %s can refuse meshlet's pods", in.Namespace)}
	}
}

// exhaustedResources are q's resources whose use has reached the limit.
func exhaustedResources(q *corev1.ResourceQuota) []string {
	var full []string
	for res, hard := range q.Status.Hard {
		if used, ok := q.Status.Used[res]; ok && used.Cmp(hard) >= 0 {
			full = append(full, fmt.Sprintf("%s %s/%s", res, used.String(), hard.String()))
		}
	}
	slices.Sort(full)
	return full
}

func hardLimits(q *corev1.ResourceQuota) string {
	var limits []string
	for res, hard := range q.Spec.Hard {
		limits = append(limits, fmt.Sprintf("%s=%s", res, hard.String()))
	}
	slices.Sort(limits)
	return strings.Join(limits, ", ")
}

func ztunnelCheck(in precheckInput) Check {
	const name = "ztunnel"
	connected := 0
	for _, nr := range in.Reports {
		if nr.Report != nil && nr.Report.Summary != nil && nr.Report.Summary.Ztunnel.Connections > 0 {
			connected++
		}
	}
	var found []string
	ready := int32(0)
	for _, ds := range in.Ztunnels {
		found = append(found, fmt.Sprintf("DaemonSet %s/%s (%d/%d ready)", ds.Namespace, ds.Name, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled))
		ready += ds.Status.NumberReady
	}
	if len(in.Ztunnels) == 0 && len(in.ZtunnelPods) > 0 {
		found = append(found, fmt.Sprintf("%d pods labelled app=ztunnel", len(in.ZtunnelPods)))
		for i := range in.ZtunnelPods {
			if in.ZtunnelPods[i].Status.Phase == corev1.PodRunning {
				ready++
			}
		}
	}
	switch {
	case connected > 0:
		return Check{Pass, name, fmt.Sprintf("connected to meshlet on %d of %d nodes asked", connected, countReports(in.Reports))}
	case ready > 0:
		return Check{Pass, name, strings.Join(found, "; ")}
	case len(found) > 0:
		return Check{Warn, name, strings.Join(found, "; ") + ": none running"}
	default:
		return Check{Fail, name, "no ztunnel (no DaemonSet named ztunnel, no pod labelled app=ztunnel, none connected to meshlet): mesh pods cannot start; install Istio's ztunnel (docs/migrating-from-istio-cni.md, \"Install Istio without istio-cni\")"}
	}
}

func countReports(reports []NodeReport) int {
	n := 0
	for _, nr := range reports {
		if nr.Report != nil {
			n++
		}
	}
	return n
}

// istioCNICheck: istio-cni and meshlet serve the same ztunnel socket; a
// node runs one of them (docs/migrating-from-istio-cni.md).
func istioCNICheck(in precheckInput) Check {
	const name = "istio-cni"
	if len(in.IstioCNIs) == 0 && len(in.IstioCNIPods) == 0 {
		return Check{Pass, name, "no istio-cni node agent"}
	}
	var found []string
	for _, ds := range in.IstioCNIs {
		found = append(found, fmt.Sprintf("DaemonSet %s/%s", ds.Namespace, ds.Name))
	}
	meshletNodes := map[string]bool{}
	if in.Meshlet != nil {
		for _, p := range in.Meshlet.Pods {
			meshletNodes[p.Spec.NodeName] = true
		}
	}
	var both []string
	for _, p := range in.IstioCNIPods {
		if n := p.Spec.NodeName; n != "" && meshletNodes[n] && !slices.Contains(both, n) {
			both = append(both, n)
		}
	}
	where := strings.Join(found, ", ")
	if where == "" {
		where = fmt.Sprintf("%d pods labelled k8s-app=istio-cni-node", len(in.IstioCNIPods))
	}
	fix := "keep it off meshlet's nodes with a node affinity, then uninstall it once no node runs it (docs/migrating-from-istio-cni.md, \"Switch a cluster, node by node\")"
	if len(both) > 0 {
		slices.Sort(both)
		return Check{Fail, name, fmt.Sprintf("%s runs on nodes meshlet runs on (%s): one node agent serves ztunnel's socket; %s", where, strings.Join(both, ", "), fix)}
	}
	return Check{Warn, name, fmt.Sprintf("%s present (on no node meshlet runs on): %s", where, fix)}
}
