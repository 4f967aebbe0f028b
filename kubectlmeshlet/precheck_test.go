package kubectlmeshlet

import (
	"bytes"
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"

	"github.com/meshlet/meshlet/agent/nodestatus"
)

// TestPrecheckCluster runs precheck against a fake clientset (the pure
// rules read only what gatherPrecheck lists; the fake serves those lists
// and the discovery answers): node-a NRI, node-b CNI mode, node-c's
// meshlet not asked on containerd 2.x, node-d without meshlet on CRI-O;
// no ztunnel, an istio-cni DaemonSet whose pod runs beside meshlet.
func TestPrecheckCluster(t *testing.T) {
	tc := twoNodeCluster(t)
	tc.objects = append(tc.objects,
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-system"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node-x", Namespace: "istio-system", Labels: map[string]string{"k8s-app": "istio-cni-node"}},
			Spec: corev1.PodSpec{NodeName: "node-a"}})
	// node-b's report has no ztunnel: take node-a's connection away too.
	r := readyReport("node-a", 1)
	r.Summary.Ztunnel.Connections = 0
	tc.exec.results["meshlet-node-a"] = execResult{Stdout: reportJSON(t, r)}
	var out bytes.Buffer
	code := run(context.Background(), []string{"precheck"}, &out, &out, tc.connect)
	if code != ExitFindings {
		t.Errorf("exit %d, want %d (FAILs)", code, ExitFindings)
	}
	golden(t, "precheck.golden", out.String())
}

// TestPrecheckRules: each rule's verdicts.
func TestPrecheckRules(t *testing.T) {
	v := func(minor string) *version.Info {
		return &version.Info{Major: "1", Minor: minor, GitVersion: "v1." + strings.TrimSuffix(minor, "+") + ".0"}
	}
	results := func(cs []Check) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Result)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct {
		in   precheckInput
		want string
	}{
		{precheckInput{ServerVersion: v("37"), DRAServed: true}, "PASS,PASS"},
		{precheckInput{ServerVersion: v("35+"), DRAServed: true}, "PASS,WARN"},
		{precheckInput{ServerVersion: v("34"), DRAServed: false}, "PASS,WARN"},
		{precheckInput{ServerVersion: v("33"), DRAServed: false}, "FAIL,WARN"},
	} {
		if got := results(kubernetesChecks(c.in)); got != c.want {
			t.Errorf("kubernetes %s served=%v: %s, want %s", c.in.ServerVersion.GitVersion, c.in.DRAServed, got, c.want)
		}
	}
	for _, c := range []struct{ runtime, result, says string }{
		{"containerd://2.1.4", Pass, "NRI on by default"},
		{"containerd://1.7.27", Warn, "NRI off by default"},
		{"containerd://1.6.9", Warn, "no NRI"},
		{"cri-o://1.34.0", Warn, "enable_nri = true"},
		{"docker://27.0.1", Warn, "CNI mode"},
	} {
		if result, msg := runtimeNRI(c.runtime); result != c.result || !strings.Contains(msg, c.says) {
			t.Errorf("runtime %s: %s %q, want %s saying %q", c.runtime, result, msg, c.result, c.says)
		}
	}
	for _, c := range []struct {
		labels map[string]string
		exists bool
		want   string
	}{
		{nil, false, Pass},
		{nil, true, Pass},
		{map[string]string{podSecurityLabel: "privileged"}, true, Pass},
		{map[string]string{podSecurityLabel: "baseline"}, true, Fail},
		{map[string]string{podSecurityLabel: "restricted"}, true, Fail},
	} {
		in := precheckInput{Namespace: "meshlet-system"}
		if c.exists {
			in.NamespaceObj = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-system", Labels: c.labels}}
		}
		if got := podSecurityCheck(in); got.Result != c.want {
			t.Errorf("namespace labels %v (exists %v): %s %q, want %s", c.labels, c.exists, got.Result, got.Message, c.want)
		}
	}

	m := &meshlet{DaemonSets: []appsv1.DaemonSet{*chartDaemonSet()}}
	quota := func(name, instance string, hard, used int64) corev1.ResourceQuota {
		q := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultNamespace, Labels: map[string]string{"app.kubernetes.io/instance": instance}},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": *resource.NewQuantity(hard, resource.DecimalSI)}}}
		q.Status.Hard = q.Spec.Hard
		q.Status.Used = corev1.ResourceList{"pods": *resource.NewQuantity(used, resource.DecimalSI)}
		return q
	}
	for _, c := range []struct {
		name   string
		quotas []corev1.ResourceQuota
		want   string
	}{
		{"none", nil, Pass},
		{"the chart's, room left", []corev1.ResourceQuota{quota("meshlet-critical-pods", "meshlet", 10, 3)}, Pass},
		{"the chart's, used up", []corev1.ResourceQuota{quota("meshlet-critical-pods", "meshlet", 3, 3)}, Warn},
		{"another", []corev1.ResourceQuota{quota("team-quota", "", 100, 3)}, Warn},
	} {
		if got := quotaCheck(precheckInput{Namespace: DefaultNamespace, Meshlet: m, Quotas: c.quotas}); got.Result != c.want {
			t.Errorf("quotas %s: %s %q, want %s", c.name, got.Result, got.Message, c.want)
		}
	}

	zt := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ztunnel", Namespace: "istio-system"}, Status: appsv1.DaemonSetStatus{NumberReady: 2, DesiredNumberScheduled: 2}}
	for _, c := range []struct {
		name string
		in   precheckInput
		want string
	}{
		{"nothing", precheckInput{}, Fail},
		{"DaemonSet ready", precheckInput{Ztunnels: []appsv1.DaemonSet{*zt}}, Pass},
		{"DaemonSet not running", precheckInput{Ztunnels: []appsv1.DaemonSet{{ObjectMeta: metav1.ObjectMeta{Name: "ztunnel"}}}}, Warn},
		{"connected to meshlet", precheckInput{Reports: []NodeReport{{Report: readyReportPtr("n")}}}, Pass},
	} {
		if got := ztunnelCheck(c.in); got.Result != c.want {
			t.Errorf("ztunnel %s: %s %q, want %s", c.name, got.Result, got.Message, c.want)
		}
	}

	cni := appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "kube-system"}}
	withMeshlet := &meshlet{Pods: []corev1.Pod{*meshletPodOn("node-a", "img")}}
	cniPod := func(node string) corev1.Pod { return corev1.Pod{Spec: corev1.PodSpec{NodeName: node}} }
	for _, c := range []struct {
		name string
		in   precheckInput
		want string
	}{
		{"absent", precheckInput{Meshlet: withMeshlet}, Pass},
		{"pods cannot schedule", precheckInput{Meshlet: withMeshlet, IstioCNIs: []appsv1.DaemonSet{cni}, IstioCNIPods: []corev1.Pod{cniPod("")}}, Warn},
		{"on other nodes", precheckInput{Meshlet: withMeshlet, IstioCNIs: []appsv1.DaemonSet{cni}, IstioCNIPods: []corev1.Pod{cniPod("node-b")}}, Warn},
		{"beside meshlet", precheckInput{Meshlet: withMeshlet, IstioCNIs: []appsv1.DaemonSet{cni}, IstioCNIPods: []corev1.Pod{cniPod("node-a")}}, Fail},
	} {
		got := istioCNICheck(c.in)
		if got.Result != c.want {
			t.Errorf("istio-cni %s: %s %q, want %s", c.name, got.Result, got.Message, c.want)
		}
		if got.Result != Pass && !strings.Contains(got.Message, "migrating-from-istio-cni.md") {
			t.Errorf("istio-cni %s: %q does not point at the migration guide", c.name, got.Message)
		}
	}
}

func readyReportPtr(node string) *nodestatus.Report {
	r := readyReport(node, 1)
	return &r
}

// TestPrecheckBeforeInstall: without meshlet, the namespace is
// meshlet-system and each node's NRI is told from its runtime.
func TestPrecheckBeforeInstall(t *testing.T) {
	tc := &testCluster{objects: []runtime.Object{node("node-a", "containerd://2.1.4"), node("node-b", "containerd://1.7.27"),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ztunnel", Namespace: "istio-system"}, Status: appsv1.DaemonSetStatus{NumberReady: 2, DesiredNumberScheduled: 2}}}}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"precheck"}, &out, &out, tc.connect); code != ExitOK {
		t.Errorf("exit %d, want 0 (warnings only):\n%s", code, out.String())
	}
	golden(t, "precheck-before-install.golden", out.String())
}
