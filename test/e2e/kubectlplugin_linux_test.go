package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/kubectlmeshlet"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// TestKubectlPlugin: the kubectl plugin, built as its binary, against a
// cluster running the chart's DaemonSet on a node whose containerd has
// NRI off, so that meshlet runs in CNI mode there. status asks the node's
// meshlet through the API server's pods/exec; version reads the chart's
// labels and the pod's image; precheck finds NRI missing and an istio-cni
// DaemonSet (whose pods cannot schedule), and fails on a namespace that
// enforces baseline; bug-report writes the archive.
func TestKubectlPlugin(t *testing.T) {
	e := startNoNRIEnv(t, theEnv(t).BinDir(), "mlkp")
	c := startClusterOn(t, e, clusterenv.Options{})
	const tag = "e2e-kubectl"
	buildImageInto(t, e, tag, false)
	r := newReleaseOn(t, c, e)
	// No NRI: auto mode falls back to CNI mode, and the init container's
	// check would stop the pod.
	r.chartValues = map[string]any{"nriCheck": map[string]any{"enabled": false}}
	r.install(tag, map[string]any{"mode": "auto"})
	pod := r.waitRolledOut(tag)
	r.connectZtunnel()

	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(t.TempDir(), "kubectl-meshlet")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-meshlet")
	build.Dir = moduleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-meshlet: %v\n%s", err, out)
	}
	// kubectl meshlet runs in the node's network namespace, where the API
	// server listens (as helm does here).
	kubectlMeshlet := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command("nsenter", append([]string{"--net=" + e.NetnsPath(), plugin, "--kubeconfig", kubeconfig}, args...)...)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("kubectl meshlet %s: %v", strings.Join(args, " "), err)
		}
		t.Logf("kubectl meshlet %s: exit %d\n%s", strings.Join(args, " "), cmd.ProcessState.ExitCode(), out)
		return string(out), cmd.ProcessState.ExitCode()
	}

	t.Run("status", func(t *testing.T) {
		waitFor(t, "kubectl meshlet status healthy", func() bool {
			_, code := kubectlMeshlet("status")
			return code == kubectlmeshlet.ExitOK
		})
		out, code := kubectlMeshlet("status", "-o", "json", "--node", env.NodeName)
		var cs kubectlmeshlet.ClusterStatus
		if err := json.Unmarshal([]byte(out), &cs); err != nil || code != kubectlmeshlet.ExitOK {
			t.Fatalf("status -o json: exit %d, %v:\n%s", code, err, out)
		}
		if len(cs.Nodes) != 1 || cs.Nodes[0].Report == nil || cs.Nodes[0].Report.Summary == nil {
			t.Fatalf("status -o json: %+v, want the node's report", cs.Nodes)
		}
		s := cs.Nodes[0].Report.Summary
		if cs.Nodes[0].Node != env.NodeName || s.RuntimeHook.Mode != "cni" || s.Ztunnel.Connections != 1 {
			t.Errorf("node %s: runtime hook %+v, ztunnel %+v; want %s in CNI mode with the stand-in connected",
				cs.Nodes[0].Node, s.RuntimeHook, s.Ztunnel, env.NodeName)
		}
		if table, _ := kubectlMeshlet("status"); !strings.Contains(table, env.NodeName) || !strings.Contains(table, "READY") {
			t.Errorf("status's table lacks the node READY:\n%s", table)
		}
	})

	t.Run("version", func(t *testing.T) {
		out, code := kubectlMeshlet("version")
		image := "localhost/meshlet/meshlet:" + tag
		if code != kubectlmeshlet.ExitOK || !strings.Contains(out, "meshlet-") || strings.Count(out, image) < 2 ||
			strings.Contains(out, "not the DaemonSet's") {
			t.Errorf("version: exit %d, want the chart and the image %s for the DaemonSet and the node, none outdated", code, image)
		}
		id := ""
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == kubectlmeshlet.ContainerName {
				id = cs.ImageID
			}
		}
		if id == "" || !strings.Contains(out, id) {
			t.Errorf("version lacks the pod's image ID %q", id)
		}
	})

	t.Run("precheck", func(t *testing.T) {
		// istio-cni's DaemonSet, its pods unschedulable.
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "kube-system"},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "istio-cni-node"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "istio-cni-node"}},
					Spec: corev1.PodSpec{NodeSelector: map[string]string{"meshlet.dev/no-such-node": "true"},
						Containers: []corev1.Container{{Name: "install-cni", Image: env.Image, ImagePullPolicy: corev1.PullNever}}}}}}
		if _, err := c.Client.AppsV1().DaemonSets(ds.Namespace).Create(t.Context(), ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out, code := kubectlMeshlet("precheck")
		for _, want := range [][2]string{{"WARN", "nri " + env.NodeName + " NRI missing, CNI fallback in use"},
			{"WARN", "istio-cni DaemonSet kube-system/istio-cni-node present"}, {"PASS", "ztunnel connected"}, {"PASS", "pod-security"}} {
			if !hasCheck(out, want[0], want[1]) {
				t.Errorf("precheck lacks %s %q", want[0], want[1])
			}
		}
		if code != kubectlmeshlet.ExitOK {
			t.Errorf("precheck: exit %d, want 0 (warnings only)", code)
		}
		// A namespace enforcing baseline: FAIL, exit 1 (admission only
		// applies to new pods: meshlet's keeps running).
		setNamespaceLabel(t, c, meshletNamespace, "pod-security.kubernetes.io/enforce", "baseline")
		out, code = kubectlMeshlet("precheck")
		if code != kubectlmeshlet.ExitFindings || !hasCheck(out, "FAIL", "pod-security") {
			t.Errorf("precheck with baseline enforced: exit %d, want 1 and a FAIL", code)
		}
		setNamespaceLabel(t, c, meshletNamespace, "pod-security.kubernetes.io/enforce", "")
	})

	t.Run("bug-report", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "report.tar.gz")
		out, code := kubectlMeshlet("bug-report", "-f", file)
		if code != kubectlmeshlet.ExitOK || strings.TrimSpace(out) != file {
			t.Fatalf("bug-report: exit %d, want 0 and the path printed", code)
		}
		files, err := kubectlmeshlet.ReadBugReport(file)
		if err != nil {
			t.Fatal(err)
		}
		top := "report/"
		for _, want := range []string{
			"status/" + env.NodeName + "_" + meshletNamespace + "_" + pod.Name + ".json",
			"logs/" + meshletNamespace + "_" + pod.Name + "_meshlet.log",
			"daemonsets/" + meshletNamespace + "_meshlet.yaml",
			"configmaps/" + meshletNamespace + "_meshlet-settings.yaml",
			"events/" + meshletNamespace + ".yaml", "events/mesh.yaml", "nodes.yaml", "version.txt", "precheck.txt",
		} {
			if _, ok := files[top+want]; !ok {
				t.Errorf("the archive lacks %s; it has %v", want, slices.Sorted(maps.Keys(files)))
			}
		}
		if errs, ok := files[top+"errors.txt"]; ok {
			t.Errorf("errors.txt:\n%s", errs)
		}
		if log := files[top+"logs/"+meshletNamespace+"_"+pod.Name+"_meshlet.log"]; !strings.Contains(log, "CNI") {
			t.Errorf("meshlet's log in the archive does not mention CNI mode:\n%s", tail(log, 20))
		}
	})
}

// setNamespaceLabel sets (value "": removes) a label of namespace ns.
func setNamespaceLabel(t *testing.T, c *clusterenv.Cluster, ns, key, value string) {
	t.Helper()
	obj, err := c.Client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	if value == "" {
		delete(obj.Labels, key)
	} else {
		obj.Labels[key] = value
	}
	if _, err := c.Client.CoreV1().Namespaces().Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hasCheck reports whether precheck's output has a line of result whose
// words (spaces squeezed) start with text.
func hasCheck(out, result, text string) bool {
	for line := range strings.Lines(out) {
		words := strings.Fields(line)
		if len(words) > 1 && words[0] == result && strings.HasPrefix(strings.Join(words[1:], " "), text) {
			return true
		}
	}
	return false
}
