package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// TestPodWithAPIServer: with a real kube-apiserver (in the environment's
// netns, where meshlet reaches it), a pod object and the matching sandbox
// created through the runtime end up enrolled with the pod's real service
// account, selected by its namespace's label, and the pod's status says
// ambient.istio.io/redirection=enabled.
func TestPodWithAPIServer(t *testing.T) {
	c, kubeconfig := apiServer(t)
	ctx := context.Background()
	ns := "bookinfo"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ambient}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"default", "bookinfo-reviews"} {
		if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apiPod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews-v1"},
		Spec: corev1.PodSpec{NodeName: env.NodeName, ServiceAccountName: "bookinfo-reviews", AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "app", Image: env.Image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "--kubeconfig="+kubeconfig, "--dra=false") // no kubelet here

	// The sandbox kubelet would create for it: same name, namespace, UID;
	// no mesh label of its own (its namespace selects it).
	spec := env.PodSpec{Name: apiPod.Name, Namespace: ns, UID: string(apiPod.UID)}
	id, err := theEnv(t).RunPod(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theEnv(t).RemovePod(id) })
	adds := m.adds(spec.UID)
	if len(adds) != 1 || adds[0].Info.GetServiceAccount() != "bookinfo-reviews" || adds[0].Info.GetNamespace() != ns {
		t.Fatalf("ztunnel got %v for the pod, want one Add with service account bookinfo-reviews", adds)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, err := c.CoreV1().Pods(ns).Get(ctx, apiPod.Name, metav1.GetOptions{})
		if err == nil && p.Annotations["ambient.istio.io/redirection"] == "enabled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod status annotation not enabled: %v %v", p.GetAnnotations(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// apiServer starts a real etcd and kube-apiserver (with apiserverArgs) in
// the shared environment's netns, where meshlet reaches them, until the
// test ends.
// It returns an admin client and the kubeconfig file meshlet is given.
func apiServer(t testing.TB, apiserverArgs ...string) (kubernetes.Interface, string) {
	t.Helper()
	return apiServerIn(t, theEnv(t), apiserverArgs...)
}

// apiServerIn is apiServer in environment e's netns.
func apiServerIn(t testing.TB, e *env.Env, apiserverArgs ...string) (kubernetes.Interface, string) {
	t.Helper()
	bin := privtest.RequireEnv(t, "MESHLET_KUBE_BIN", "the directory test/env/install-kube.sh prints (`make test` sets it)")
	k, err := kubeenv.StartIn(bin, t.TempDir(), e.NetnsPath(), apiserverArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	c, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := k.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig
}
