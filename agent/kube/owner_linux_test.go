package kube_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/agent/kube"
)

// TestDaemonSetRemoved: meshlet's own DaemonSet, read and watched with the
// role of deploy/rbac.yaml, tells an uninstall (deleted, being deleted, or
// replaced by another of that name) from an update (still there). Without a
// controller-manager here the pod's owner reference is set by hand and a
// foreground deletion stays pending, which is what a stopping meshlet
// sees while the garbage collector works.
func TestDaemonSetRemoved(t *testing.T) {
	c := admin(t)
	rc := restrictedClient(t)
	ns := namespace(t, c, nil)
	ctx := context.Background()
	labels := meshletLabels
	newDS := func() *appsv1.DaemonSet { return createDaemonSet(t, c, ns) }
	ds := newDS()
	newPod := func(name string, owner *appsv1.DaemonSet) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "meshlet", Image: "meshlet"}}}}
		if owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		}
		_, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
	}
	newPod("meshlet-a", ds)
	newPod("loose", nil)
	check := func(what, pod string, want, wantErr bool) {
		t.Helper()
		removed, err := kube.DaemonSetRemoved(ctx, rc, ns, pod)
		if removed != want || (err != nil) != wantErr {
			t.Fatalf("%s: removed %v, err %v; want removed %v, error %v", what, removed, err, want, wantErr)
		}
	}
	check("DaemonSet in place (an update)", "meshlet-a", false, false)
	// The watch sees the deletion below while the role still allows it.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := kube.WatchDaemonSet(wctx, rc, ns, "meshlet-a")
	if w.Removed() {
		t.Fatal("watch: DaemonSet removed while it is in place")
	}
	check("pod without a DaemonSet", "loose", false, true)
	check("pod gone", "nosuchpod", false, true)

	fg := metav1.DeletePropagationForeground
	must(t, c.AppsV1().DaemonSets(ns).Delete(ctx, "meshlet", metav1.DeleteOptions{PropagationPolicy: &fg}))
	check("DaemonSet being deleted", "meshlet-a", true, false)
	deadline := time.Now().Add(10 * time.Second)
	for !w.Removed() {
		if time.Now().After(deadline) {
			t.Fatal("watch: the DaemonSet's deletion not seen within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Gone for good, then a new DaemonSet of the same name: the pod's
	// owner is still gone.
	got, err := c.AppsV1().DaemonSets(ns).Get(ctx, "meshlet", metav1.GetOptions{})
	must(t, err)
	got.Finalizers = nil
	_, err = c.AppsV1().DaemonSets(ns).Update(ctx, got, metav1.UpdateOptions{})
	must(t, err)
	check("DaemonSet deleted", "meshlet-a", true, false)
	newDS()
	check("DaemonSet replaced by another of that name", "meshlet-a", true, false)
}

// TestSiblingOnNode: with meshlet's role, a meshlet finds the running pod
// of its own DaemonSet it replaces on its node (a surge update), and none
// where there is none: not its own pod, not another node's, not a pod of
// another owner, not one that is not running.
func TestSiblingOnNode(t *testing.T) {
	c := admin(t)
	rc := restrictedClient(t)
	ns := namespace(t, c, nil)
	ctx := context.Background()
	labels := meshletLabels
	ds := createDaemonSet(t, c, ns)
	newPod := func(name, node string, owned bool, phase corev1.PodPhase) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "meshlet", Image: "meshlet"}}}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		}
		p, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
		p.Status.Phase = phase
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must(t, err)
	}
	newPod("meshlet-new", "n1", true, corev1.PodPending)
	newPod("meshlet-b", "n2", true, corev1.PodRunning)
	newPod("other-owner", "n1", false, corev1.PodRunning)
	newPod("meshlet-lone", "n3", true, corev1.PodRunning)
	newPod("meshlet-done", "n3", true, corev1.PodSucceeded)
	check := func(pod, node, want string) {
		t.Helper()
		got, err := kube.SiblingOnNode(ctx, rc, ns, pod, node)
		if err != nil || got != want {
			t.Errorf("SiblingOnNode(%s on %s) = %q, %v; want %q", pod, node, got, err, want)
		}
	}
	check("meshlet-new", "n1", "")
	check("meshlet-lone", "n3", "")
	newPod("meshlet-old", "n1", true, corev1.PodRunning)
	check("meshlet-new", "n1", "meshlet-old")
	if _, err := kube.SiblingOnNode(ctx, rc, ns, "other-owner", "n1"); err == nil {
		t.Error("SiblingOnNode of a pod without a DaemonSet: no error")
	}
}

// meshletLabels select the test's meshlet DaemonSet's pods.
var meshletLabels = map[string]string{"app": "meshlet"}

// createDaemonSet creates a DaemonSet "meshlet" in ns (no controller runs
// here: its pods are made by hand).
func createDaemonSet(t *testing.T, c kubernetes.Interface, ns string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := c.AppsV1().DaemonSets(ns).Create(context.Background(), &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "meshlet"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: meshletLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: meshletLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "meshlet", Image: "meshlet"}}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	return ds
}
