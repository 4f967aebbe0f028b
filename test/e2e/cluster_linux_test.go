package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// TestPodsThroughKubelet: on a real single-node cluster (the runtime's
// containerd, a kubelet, scheduler and controller-manager), a pod created
// through the API server in a namespace labelled for the mesh is scheduled,
// started by the kubelet, enrolled by meshlet before its container starts
// (ztunnel gets its real UID and service account), reported enabled in its
// status annotation, and released when deleted; a pod in an unlabelled
// namespace runs untouched.
func TestPodsThroughKubelet(t *testing.T) {
	c := startCluster(t, nil)
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+c.KubeletRootDir())

	ctx := context.Background()
	for ns, labels := range map[string]map[string]string{"shop": ambient, "plain": nil} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newPod := func(ns, name string) *corev1.Pod {
		p, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: new(bool), TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "app", Image: env.Image, ImagePullPolicy: corev1.PullNever}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mesh, plain := newPod("shop", "cart"), newPod("plain", "batch")
	for _, p := range []*corev1.Pod{mesh, plain} {
		waitPod(t, c, p, "Running with its container ready", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
		})
	}
	adds := m.adds(string(mesh.UID))
	if len(adds) != 1 || adds[0].Info.GetNamespace() != "shop" || adds[0].Info.GetName() != "cart" || adds[0].Info.GetServiceAccount() != "default" {
		t.Fatalf("ztunnel got %v for the mesh pod, want one Add of shop/cart with service account default", adds)
	}
	if got := m.adds(string(plain.UID)); len(got) != 0 {
		t.Fatalf("ztunnel got %v for the pod outside the mesh", got)
	}
	waitPod(t, c, mesh, "annotated ambient.istio.io/redirection=enabled", func(p *corev1.Pod) bool {
		return p.Annotations["ambient.istio.io/redirection"] == "enabled"
	})

	if err := c.Client.CoreV1().Pods("shop").Delete(ctx, mesh.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m.waitFor("Del of the deleted mesh pod", func(rs []*zdstest.Request) bool { return hasDel(rs, string(mesh.UID)) })
}

// startCluster starts a single-node cluster on the runtime, with feature
// gates set on every component (stopped, and its machine changes undone,
// at the end of the test).
func startCluster(t testing.TB, gates map[string]bool) *clusterenv.Cluster {
	t.Helper()
	return startClusterWith(t, clusterenv.Options{FeatureGates: gates})
}

// startClusterWith starts a cluster with opts' feature gates and kubelet
// settings; the rest is the test environment's.
func startClusterWith(t testing.TB, opts clusterenv.Options) *clusterenv.Cluster {
	t.Helper()
	return startClusterOn(t, theEnv(t), opts)
}

// startClusterOn is startClusterWith on the runtime of environment e.
func startClusterOn(t testing.TB, e *env.Env, opts clusterenv.Options) *clusterenv.Cluster {
	t.Helper()
	bin := privtest.RequireEnv(t, clusterenv.BinEnv, "the directory test/env/install-cluster.sh prints (`make test` sets it)")
	dir, err := os.MkdirTemp("", "mlc") // short: the kubelet's socket paths live under it
	if err != nil {
		t.Fatal(err)
	}
	opts.BinDir, opts.Dir, opts.NetnsPath, opts.CRISocket, opts.NodeName, opts.Logf = bin, dir, e.NetnsPath(), e.CRISocket, env.NodeName, t.Logf
	opts.RemoveSandboxes = func() error { _, err := e.Crictl("rmp", "--all", "--force"); return err }
	c, err := clusterenv.Start(opts)
	if err != nil {
		t.Fatalf("cluster: %v (logs kept in %s)", err, dir)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("cluster teardown: %v", err)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("cluster logs kept in %s", dir)
		}
	})
	return c
}

// waitPod polls the pod until cond holds (at most 60 s: the first pod also
// waits for the kubelet's first sync).
func waitPod(t testing.TB, c *clusterenv.Cluster, p *corev1.Pod, what string, cond func(*corev1.Pod) bool) {
	t.Helper()
	waitPodFor(t, c, p, what, 60*time.Second, cond)
}

// podSandbox is the pod's ready sandbox and its netns path.
func podSandbox(t testing.TB, p *corev1.Pod) (id, netns string) {
	t.Helper()
	return podSandboxIn(t, theEnv(t), p)
}

// podSandboxIn is podSandbox on the runtime of environment e.
func podSandboxIn(t testing.TB, e *env.Env, p *corev1.Pod) (id, netns string) {
	t.Helper()
	out, err := e.Crictl("pods", "-q", "--state", "ready", "--label", "io.kubernetes.pod.uid="+string(p.UID))
	if id = strings.TrimSpace(out); err != nil || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("sandbox of pod %s: %q %v", p.Name, out, err)
	}
	info, err := e.InspectPod(id)
	if err != nil {
		t.Fatal(err)
	}
	return id, info.NetnsPath
}

// waitPodFor is waitPod with a deadline of its own.
func waitPodFor(t testing.TB, c *clusterenv.Cluster, p *corev1.Pod, what string, timeout time.Duration, cond func(*corev1.Pod) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := c.Client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err == nil && cond(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not %s: %+v, %v", p.Namespace, p.Name, what, got.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
