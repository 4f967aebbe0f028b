package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/internal/helmchart"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
)

// TestWithoutDRA: on an API server that does not serve resource.k8s.io/v1
// (the DRA APIs turned off, as on a cluster older than 1.34), helm install
// of the chart with its defaults renders no DRA object and runs meshlet
// with --dra=false (Helm's capabilities from the real discovery, checked
// by the API server's dry run); and a meshlet started with --dra anyway
// runs without DRA, says so once, and enrolls a pod its namespace selects.
func TestWithoutDRA(t *testing.T) {
	c, kubeconfig := apiServer(t, "--runtime-config=resource.k8s.io/v1=false")
	ctx := context.Background()
	if _, err := c.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); err == nil {
		t.Fatal("the API server serves resource.k8s.io/v1: the premise of the test")
	}

	// helm install, server-side dry run: the chart reads the cluster.
	helmDir := privtest.RequireEnv(t, helmchart.HelmEnv, "the directory hack/install-helm.sh prints (`make test` sets it)")
	out, err := exec.Command("nsenter", "--net="+theEnv(t).NetnsPath(), filepath.Join(helmDir, "helm"), "--kubeconfig", kubeconfig,
		"install", "meshlet", filepath.Join(moduleRoot(t), helmchart.ChartDir), "-n", "meshlet-system", "--create-namespace",
		"--dry-run=server").CombinedOutput()
	if err != nil {
		t.Fatalf("helm install --dry-run=server without DRA: %v\n%s", err, out)
	}
	// The release's objects: after the hooks, before the notes.
	manifest, _, _ := strings.Cut(string(out), "NOTES:")
	if _, objects, ok := strings.Cut(manifest, "MANIFEST:"); ok {
		manifest = objects
	}
	manifest = manifest[strings.Index(manifest, "---"):]
	objs, err := helmchart.Decode([]byte(manifest))
	if err != nil {
		t.Fatalf("helm's manifest: %v\n%s", err, manifest)
	}
	found := false
	for _, o := range objs {
		if o.Kind == "DeviceClass" || strings.Contains(o.Name, "resourceslices") {
			t.Errorf("%s %s rendered for a cluster without DRA", o.Kind, o.Name)
		}
		if o.Kind == "DaemonSet" {
			found = true
			if !strings.Contains(string(o.Raw), `{name: MESHLET_DRA, value: "false"}`) {
				t.Errorf("the DaemonSet does not run meshlet with --dra=false:\n%s", o.Raw)
			}
		}
	}
	if !found || !strings.Contains(string(out), "DRA is off") {
		t.Errorf("no DaemonSet, or the notes do not say DRA is off:\n%s", out)
	}

	// meshlet with --dra (its default) on this API server.
	ns := "nodra"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ambient}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiPod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec:       corev1.PodSpec{NodeName: env.NodeName, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "app", Image: env.Image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubelet := t.TempDir() // a kubelet root the DRA plugin would register in
	m := startMesh(t, "--kubeconfig="+kubeconfig, "--dra=true", "--kubelet-root-dir="+kubelet)
	spec := env.PodSpec{Name: apiPod.Name, Namespace: ns, UID: string(apiPod.UID)}
	id, err := theEnv(t).RunPod(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theEnv(t).RemovePod(id) })
	if adds := m.adds(spec.UID); len(adds) != 1 {
		t.Fatalf("ztunnel got %v for the pod, want one Add", adds)
	}
	log, err := os.ReadFile(m.meshlet.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	const said = "The API server does not serve DRA as meshlet needs it"
	if n := strings.Count(string(log), said); n != 1 {
		t.Errorf("meshlet said %q %d times, want once:\n%s", said, n, log)
	}
	if !strings.Contains(string(log), `"meshlet started"`) || !strings.Contains(string(log), " dra=false gate=false") {
		t.Errorf("meshlet's start line does not say dra=false:\n%s", log)
	}
	if ents, _ := os.ReadDir(filepath.Join(kubelet, "plugins_registry")); len(ents) != 0 {
		t.Errorf("a DRA plugin registered with the kubelet: %v", ents)
	}
}
