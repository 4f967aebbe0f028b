package kube_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestLookupPod: the DRA plugin's view of a pod it prepares a claim for,
// on the real API server: labels, host network, the handler of its
// RuntimeClass and its claims' names; found false for a pod that is gone,
// replaced (another UID) or being deleted.
func TestLookupPod(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	ns := namespace(t, c, nil)
	_, err := c.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed-" + ns}, Handler: "runsc"}, metav1.CreateOptions{})
	must(t, err)
	claimName := "shared-mesh"
	p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, RuntimeClassName: ptr("sandboxed-" + ns), AutomountServiceAccountToken: new(bool),
			ResourceClaims: []corev1.PodResourceClaim{{Name: "mesh", ResourceClaimName: &claimName}},
			Containers:     []corev1.Container{{Name: "app", Image: "meshlet.test/pause:1"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	w, wctx := startWatcher(t, c)

	pod, info, found, err := w.LookupPod(wctx, ns, p.Name, string(p.UID))
	must(t, err)
	if !found || pod.UID != string(p.UID) || pod.Labels["app"] != "web" || !pod.HostNetwork || pod.RuntimeHandler != "runsc" {
		t.Fatalf("LookupPod = %+v found=%t, want the pod with its labels, host network and handler runsc", pod, found)
	}
	if !slices.Contains(info.ResourceClaims, claimName) || info.ServiceAccount != "default" {
		t.Fatalf("info %+v, want claim %s and service account default", info, claimName)
	}

	if _, _, found, err := w.LookupPod(wctx, ns, p.Name, "another-uid"); err != nil || found {
		t.Fatalf("a replaced pod (other UID): found=%t err=%v, want not found", found, err)
	}
	if _, _, found, err := w.LookupPod(wctx, ns, "absent", "absent-uid"); err != nil || found {
		t.Fatalf("an absent pod: found=%t err=%v, want not found", found, err)
	}

	// A finalizer keeps the deleted pod visible with its deletion time.
	_, err = c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "going", Finalizers: []string{"meshlet.test/hold"}},
		Spec:       corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "app", Image: "meshlet.test/pause:1"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	must(t, c.CoreV1().Pods(ns).Delete(ctx, "going", metav1.DeleteOptions{}))
	going, err := c.CoreV1().Pods(ns).Get(ctx, "going", metav1.GetOptions{})
	must(t, err)
	t.Cleanup(func() {
		_, _ = c.CoreV1().Pods(ns).Patch(context.Background(), "going", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	eventually(t, "the terminating pod reported not found", func() bool {
		_, _, found, err := w.LookupPod(wctx, ns, "going", string(going.UID))
		return err == nil && !found
	})
}
