package kube_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/agent/kube"
)

// TestDeparting: with the role of deploy/rbac.yaml, meshlet tells a stop
// that leaves its node without a meshlet (its DaemonSet deleted, being
// deleted or replaced by another of that name; the node no longer selected
// by it; its service account's access revoked) from one that does not (an
// update: the DaemonSet still there and selecting the node), and the watch
// sees the deletion. Without a controller-manager here the pod's owner
// reference is set by hand and a foreground deletion stays pending, which
// is what a stopping meshlet sees while the garbage collector works.
func TestDeparting(t *testing.T) {
	c := admin(t)
	rc := restrictedClient(t)
	ns := namespace(t, c, nil)
	ctx := context.Background()
	labels := meshletLabels
	newDS := func() *appsv1.DaemonSet { return createDaemonSet(t, c, ns) }
	ds := newDS()
	newPod := func(name string, owner *appsv1.DaemonSet) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "meshlet", Image: "meshlet"}}}}
		if owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		}
		_, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
	}
	newPod("meshlet-a", ds)
	newPod("loose", nil)
	setNodeLabel(t, c, mesh, "true")
	check := func(what string, client kubernetes.Interface, pod string, want kube.Departure, wantErr bool) {
		t.Helper()
		got, err := kube.Departing(ctx, client, ns, pod, node)
		if got != want || (err != nil) != wantErr {
			t.Fatalf("%s: %q, err %v; want %q, error %v", what, got, err, want, wantErr)
		}
	}
	check("DaemonSet in place (an update)", rc, "meshlet-a", kube.Stays, false)
	check("pod without a DaemonSet", rc, "loose", kube.Stays, true)
	check("pod gone", rc, "nosuchpod", kube.Stays, true)

	// The node leaves the DaemonSet's node selector: its labels change,
	// then the DaemonSet's selector does. Only a pod being deleted is
	// leaving: a container restart meanwhile is not.
	setNodeLabel(t, c, mesh, "false")
	check("container restart on a node relabelled out of the node selector", rc, "meshlet-a", kube.Stays, false)
	p, err := c.CoreV1().Pods(ns).Get(ctx, "meshlet-a", metav1.GetOptions{})
	must(t, err)
	p.Finalizers = []string{"example.com/hold"} // deleted, not gone
	_, err = c.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
	must(t, err)
	must(t, c.CoreV1().Pods(ns).Delete(ctx, "meshlet-a", metav1.DeleteOptions{}))
	t.Cleanup(func() {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), "meshlet-a", metav1.GetOptions{})
		if err == nil {
			p.Finalizers = nil
			_, _ = c.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
		}
	})
	check("node relabelled out of the node selector", rc, "meshlet-a", kube.NodeDeselected, false)
	setNodeLabel(t, c, mesh, "true")
	check("node relabelled back", rc, "meshlet-a", kube.Stays, false)
	affinity := func(op corev1.NodeSelectorOperator) {
		got, err := c.AppsV1().DaemonSets(ns).Get(ctx, "meshlet", metav1.GetOptions{})
		must(t, err)
		got.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: mesh, Operator: op, Values: []string{"true"}}}}},
		}}}
		_, err = c.AppsV1().DaemonSets(ns).Update(ctx, got, metav1.UpdateOptions{})
		must(t, err)
	}
	affinity(corev1.NodeSelectorOpNotIn)
	check("DaemonSet's affinity changed to exclude the node", rc, "meshlet-a", kube.NodeDeselected, false)
	affinity(corev1.NodeSelectorOpIn)
	check("DaemonSet's affinity selecting the node again", rc, "meshlet-a", kube.Stays, false)

	// A service account with no role binding: what meshlet sees once an
	// uninstall has deleted its ClusterRoleBinding before its pod stopped.
	none, _ := tokenClient(t, c, "unbound")
	check("role binding gone", none, "meshlet-a", kube.AccessRevoked, false)
	// A token whose pod is gone is refused (Unauthorized): that says
	// nothing about an uninstall.
	gone, bound := tokenClient(t, c, "meshlet-a-token")
	bindRole(t, c, bound.Namespace, "meshlet-a-token")
	check("token of a live pod", gone, "meshlet-a", kube.Stays, false)
	zero := int64(0)
	must(t, c.CoreV1().Pods(bound.Namespace).Delete(ctx, bound.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	goneBy := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.CoreV1().Pods(bound.Namespace).Get(ctx, bound.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(goneBy) {
			t.Fatal("the token's pod is not gone within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The API server notices the pod's deletion through its caches.
	for {
		got, err := kube.Departing(ctx, gone, ns, "meshlet-a", node)
		if apierrors.IsUnauthorized(err) && got == kube.Stays {
			break
		}
		if time.Now().After(goneBy) {
			t.Fatalf("token of a pod gone: %q, %v; want Stays, Unauthorized", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The watch sees the deletion below while the role still allows it.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := kube.WatchDaemonSet(wctx, rc, ns, "meshlet-a")
	if w.Removed() {
		t.Fatal("watch: DaemonSet removed while it is in place")
	}
	fg := metav1.DeletePropagationForeground
	must(t, c.AppsV1().DaemonSets(ns).Delete(ctx, "meshlet", metav1.DeleteOptions{PropagationPolicy: &fg}))
	check("DaemonSet being deleted", rc, "meshlet-a", kube.DaemonSetDeleted, false)
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
	check("DaemonSet deleted", rc, "meshlet-a", kube.DaemonSetDeleted, false)
	newDS()
	check("DaemonSet replaced by another of that name", rc, "meshlet-a", kube.DaemonSetDeleted, false)
}

// mesh is the node label the test's DaemonSet selects nodes by.
const mesh = "example.com/meshlet"

// setNodeLabel sets the label key=value on the test's node.
func setNodeLabel(t *testing.T, c kubernetes.Interface, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	_, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
}

// tokenClient is a client of a new service account sa (no role bound to
// it), with a token bound to a pod on the test's node, as meshlet's is;
// and that pod.
func tokenClient(t *testing.T, c kubernetes.Interface, sa string) (kubernetes.Interface, *corev1.Pod) {
	t.Helper()
	ns := namespace(t, c, nil)
	p := podOn(t, c, node, ns, sa, sa, nil)
	return boundClient(t, c, p, sa), p
}

// bindRole binds deploy/rbac.yaml's ClusterRole to the service account
// ns/sa.
func bindRole(t *testing.T, c kubernetes.Interface, ns, sa string) {
	t.Helper()
	applyRBAC(t, c)
	_, err := c.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "meshlet-" + ns + "-" + sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "meshlet"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	must(t, err)
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
				Spec: corev1.PodSpec{NodeSelector: map[string]string{mesh: "true"}, Containers: []corev1.Container{{Name: "meshlet", Image: "meshlet"}}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	return ds
}
