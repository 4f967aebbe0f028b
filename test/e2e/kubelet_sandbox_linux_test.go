package e2e

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// TestKubeletRecreatesSandbox: on a real cluster, the pause process of a
// mesh pod's sandbox dies; the kubelet stops the sandbox and re-creates it
// (same UID, attempt 1, a new netns), and its garbage collection later
// stops and removes the old one while the new one runs. For a pod
// selected by its namespace's label and for a pod with a mesh claim, the
// pod stays enrolled in its new sandbox: ztunnel's last Add names the new
// netns and no Del follows it, the rules are in the new netns, meshlet
// has it enrolled there, its redirection annotation says enabled, and the
// claim's status carries the new sandbox's IP.
func TestKubeletRecreatesSandbox(t *testing.T) {
	c := startClusterWith(t, clusterenv.Options{KeepNoDeadContainers: true})
	ctx := context.Background()
	applyManifest(t, c, "../../deploy/dra.yaml", "DeviceClass")
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+c.KubeletRootDir())
	t.Cleanup(func() {
		if err := c.DeletePods(); err != nil {
			t.Errorf("delete pods: %v", err)
		}
	})
	for ns, labels := range map[string]map[string]string{"shop": ambient, draNamespace: nil} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitDeviceTaint(t, c, false)
	template := exampleTemplate(t)
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(draNamespace).Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labelled := basePod("cart")
	labelled.Namespace = "shop"
	pods := []*corev1.Pod{createPod(t, c, labelled), createPod(t, c, meshPodByClaim("claimed", template.Name))}

	old := map[string]string{} // pod UID → its first sandbox
	for _, p := range pods {
		waitPod(t, c, p, "Running", running)
		waitPod(t, c, p, "annotated enabled", redirectionEnabled)
		ids := sandboxesOf(t, p)
		if len(ids) != 1 {
			t.Fatalf("pod %s has sandboxes %v, want one", p.Name, ids)
		}
		old[string(p.UID)] = ids[0]
		info, err := theEnv(t).InspectPod(ids[0])
		if err != nil || info.Pid == 0 {
			t.Fatalf("sandbox %s of pod %s: %+v, %v; want its pause process", ids[0], p.Name, info, err)
		}
		if err := syscall.Kill(info.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	current := map[string]*pod{}
	for _, p := range pods {
		var cur string
		waitPod(t, c, p, "Running in a new sandbox", func(got *corev1.Pod) bool {
			cur = ""
			for _, id := range sandboxesOf(t, got) {
				if info, err := theEnv(t).InspectPod(id); err == nil && id != old[string(p.UID)] && info.State == "SANDBOX_READY" {
					cur = id
				}
			}
			return cur != "" && running(got)
		})
		info, err := theEnv(t).InspectPod(cur)
		if err != nil {
			t.Fatal(err)
		}
		current[string(p.UID)] = &pod{spec: env.PodSpec{UID: string(p.UID), Name: p.Name, Namespace: p.Namespace}, id: cur, info: info}
	}
	t.Logf("sandboxes re-created %v after their pause processes died", time.Since(start).Round(time.Millisecond))

	// The kubelet's garbage collection (every minute) stops and removes
	// the old sandboxes.
	waitForfWithin(t, 150*time.Second, func() (bool, string) {
		for _, p := range pods {
			if slices.Contains(sandboxesOf(t, p), old[string(p.UID)]) {
				return false, ""
			}
		}
		return true, ""
	}, func() string { return "the kubelet's garbage collection of the old sandboxes" })
	t.Logf("old sandboxes removed %v after their pause processes died", time.Since(start).Round(time.Millisecond))

	for _, p := range pods {
		cur := current[string(p.UID)]
		wantEnrolledIn(t, m, theEnv(t), cur, inode(t, cur.info.NetnsPath))
		waitPod(t, c, p, "annotated enabled", redirectionEnabled)
	}
	waitClaimEnrolled(t, c, claimOf(t, c, pods[1]), pods[1])
}

// sandboxesOf lists the IDs of the pod's sandboxes the runtime has, in
// any state.
func sandboxesOf(t *testing.T, p *corev1.Pod) []string {
	t.Helper()
	out, err := theEnv(t).Crictl("pods", "-q", "--label", "io.kubernetes.pod.uid="+string(p.UID))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)
}

func redirectionEnabled(p *corev1.Pod) bool {
	return p.Annotations["ambient.istio.io/redirection"] == "enabled"
}
