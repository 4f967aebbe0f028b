package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/test/env"
)

// TestNodeSettingsFromConfigMaps: with a real kube-apiserver, meshlet
// reads two NodeSettings ConfigMaps merged in order over its flags (the
// later wins), and applies changes while it runs: the DNS capture default
// changed re-programs a running pod; a namespace excluded takes running
// pods out. A document that cannot be used keeps its last good one (a pod
// started after it gets the last good settings, not the flags'), with an
// event on the ConfigMap, meshlet_settings_valid 0 and /readyz naming it.
func TestNodeSettingsFromConfigMaps(t *testing.T) {
	c, kubeconfig := apiServer(t)
	ctx := context.Background()
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "meshlet"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: ambient}},
	} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const header = "apiVersion: meshlet.dev/v1alpha1\nkind: NodeSettings\n"
	settings := func(name, doc string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "meshlet"}, Data: map[string]string{"settings.yaml": header + doc}}
	}
	cms := c.CoreV1().ConfigMaps("meshlet")
	// The flags: DNS capture on (the default), kube-system excluded. The
	// base excludes shop too and turns DNS capture off; the override,
	// later, excludes kube-system alone and turns it on again.
	if _, err := cms.Create(ctx, settings("base", "dnsCapture: false\nexcludedNamespaces: [kube-system, shop]\n"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	override, err := cms.Create(ctx, settings("override", "dnsCapture: true\nexcludedNamespaces: [kube-system]\nlogVerbosity: 3\n"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "--kubeconfig="+kubeconfig, "--dra=false", "--config-map=meshlet/base", "--config-map=meshlet/override")
	if got := debugSettings(t); got.Effective.LogVerbosity != 3 || len(got.ConfigMaps) != 2 || got.ConfigMaps[1].State != "applied" {
		t.Fatalf("/debug/settings: %+v, want the override applied (logVerbosity 3)", got)
	}

	// Enrolled: the override's namespaces win over the base's.
	firstUID, firstInfo := runLabelledAPIPod(t, c, "shop", "cart", nil)
	first := firstInfo.NetnsPath
	waitDNSRedirect(t, first, true, "the override's dnsCapture: true")

	// The override no longer sets DNS capture: the base's false applies
	// over the flags' true, and the running pod is re-programmed.
	override.Data["settings.yaml"] = header + "excludedNamespaces: [kube-system]\nlogVerbosity: 3\n"
	if _, err := cms.Update(ctx, override, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDNSRedirect(t, first, false, "the base's dnsCapture: false, once the override leaves it")
	// ztunnel kept the pod through the rewrite of its rules.
	if c := m.state.Counts(firstUID); c.Starts != 1 || c.Disrupted() {
		t.Fatalf("re-programming the running pod: its proxy %+v at ztunnel, want started once and never drained", c)
	}

	// An invalid base: its last good document (dnsCapture: false) stays.
	base, err := cms.Get(ctx, "base", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base.Data["settings.yaml"] = header + "dnsCapture: maybe\n"
	if _, err := cms.Update(ctx, base, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForf(t, func() (bool, string) {
		_, page, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
		if err != nil {
			return false, err.Error()
		}
		v, ok := metricValue(page, `meshlet_settings_valid{configmap="meshlet/base"}`)
		return ok && v == 0, ""
	}, func() string { return `meshlet_settings_valid{configmap="meshlet/base"} 0` })
	waitForf(t, func() (bool, string) {
		evs, err := c.CoreV1().Events("meshlet").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=base,involvedObject.kind=ConfigMap"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "InvalidNodeSettings" && strings.Contains(e.Message, "dnsCapture") && strings.Contains(e.Message, "last good") {
				return true, ""
			}
		}
		return false, ""
	}, func() string { return "an InvalidNodeSettings event on ConfigMap meshlet/base naming dnsCapture" })
	if code, body, err := m.meshlet.Get(m.meshlet.HealthURL + "/readyz"); err != nil || code != 200 || !strings.Contains(body, "meshlet/base") {
		t.Fatalf("/readyz with an invalid document: %d %q %v; want ready, naming meshlet/base", code, body, err)
	}
	second := runAPIPod(t, c, "shop", "checkout")
	waitDNSRedirect(t, second, false, "a pod started after the invalid document gets the last good settings (dnsCapture: false), not the flags' (true)")

	// The override deleted: the base's last good namespaces (shop
	// excluded) apply, and both running pods leave the mesh.
	if err := cms.Delete(ctx, "override", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, netns := range []string{first, second} {
		waitForf(t, func() (bool, string) { return !hasRules(t, netns), "" },
			func() string { return "the rules of a pod in shop removed once shop is excluded" })
	}
}

// debugSettings reads /debug/settings from the shared environment's
// meshlet (its debug socket in --state-dir).
func debugSettings(t *testing.T) (v struct {
	Effective struct {
		LogVerbosity int  `json:"logVerbosity"`
		DNSCapture   bool `json:"dnsCapture"`
	} `json:"effective"`
	ConfigMaps []struct {
		ConfigMap, State string
	} `json:"configMaps"`
}) {
	t.Helper()
	getDebug(t, theEnv(t).MeshletStateDir(), "/debug/settings", &v)
	return v
}

// runAPIPod creates a pod object and the sandbox kubelet would create for
// it, and returns its network namespace. The runtime's hook decides (and
// enrolls) it before the sandbox is up.
func runAPIPod(t *testing.T, c kubernetes.Interface, ns, name string) string {
	t.Helper()
	_, info := runLabelledAPIPod(t, c, ns, name, nil)
	return info.NetnsPath
}

// runLabelledAPIPod is runAPIPod for a pod with labels; it returns the
// pod's UID and what the runtime says of its sandbox.
func runLabelledAPIPod(t *testing.T, c kubernetes.Interface, ns, name string, labels map[string]string) (string, env.PodInfo) {
	t.Helper()
	ctx := context.Background()
	p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: env.NodeName, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "app", Image: env.Image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := theEnv(t).RunPod(env.PodSpec{Name: name, Namespace: ns, UID: string(p.UID), Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theEnv(t).RemovePod(id) })
	info, err := theEnv(t).InspectPod(id)
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID), info
}

// waitDNSRedirect waits until the pod's in-pod rules redirect its DNS to
// ztunnel (or do not).
func waitDNSRedirect(t *testing.T, netnsPath string, want bool, why string) {
	t.Helper()
	var rules string
	waitForf(t, func() (bool, string) {
		out, err := exec.Command("nsenter", "--net="+netnsPath, "nft", "list", "table", "inet", "meshlet").CombinedOutput()
		rules = string(out)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(rules, "redirect to :15053") == want, ""
	}, func() string {
		return "DNS redirected = " + map[bool]string{true: "true", false: "false"}[want] + " (" + why + "); rules:\n" + rules
	})
}
