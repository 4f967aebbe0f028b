package kube

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// ownerDaemonSet returns the pod namespace/name and the name and UID of
// the DaemonSet that controls it.
func ownerDaemonSet(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.Pod, string, types.UID, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, "", "", fmt.Errorf("own pod %s/%s: %w", namespace, name, err)
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "DaemonSet" {
		return nil, "", "", fmt.Errorf("own pod %s/%s is not controlled by a DaemonSet", namespace, name)
	}
	return pod, owner.Name, owner.UID, nil
}

// removed is whether ds (nil: not found) is no longer the DaemonSet uid.
func removed(ds *appsv1.DaemonSet, uid types.UID) bool {
	return ds == nil || ds.UID != uid || ds.DeletionTimestamp != nil
}

// A Departure says why a stopping meshlet may be its node's last.
// DaemonSetDeleted and NodeDeselected: no meshlet of its DaemonSet will
// serve the node after it, so it takes its state off the node (an
// uninstall on that node). AccessRevoked: it cannot tell. Stays, on an
// update, a restart, a drain or a node shutdown, keeps everything for the
// next meshlet.
type Departure string

const (
	Stays Departure = ""
	// DaemonSetDeleted: the DaemonSet is deleted or being deleted (helm
	// uninstall, kubectl delete), or replaced by another of that name.
	DaemonSetDeleted Departure = "meshlet's DaemonSet is deleted"
	// NodeDeselected: meshlet's pod is being deleted and the DaemonSet's
	// node selector or required node affinity no longer matches the node
	// (its labels changed, or the DaemonSet's selector did): the DaemonSet
	// controller deletes the pod and starts none there. A container
	// restart (the pod not deleted) is not one, whatever the labels.
	NodeDeselected Departure = "meshlet's DaemonSet no longer selects this node"
	// AccessRevoked: the API server forbids meshlet's own pod or DaemonSet
	// to its service account. An uninstall that deleted meshlet's role
	// binding before its pod stopped looks so (kubectl delete -f deletes
	// them in any order), and a meshlet that kept its CNI entry then would
	// leave the node refusing pods with no one to serve them; but so does
	// an update that renames the account, or an authorizer's hiccup. The
	// caller does what is safe both ways.
	AccessRevoked Departure = "the API server forbids meshlet's own pod and DaemonSet to its service account"
)

// Departing tells whether the meshlet of pod namespace/name, on node, is
// its node's last (see Departure). A pod without a DaemonSet owner, a pod
// or node that is already gone, a token the API server no longer accepts
// (Unauthorized: its pod or account is gone, or the authenticator failed)
// or any other error says nothing: Stays, with err saying why, so that
// the caller keeps what it installed.
func Departing(ctx context.Context, client kubernetes.Interface, namespace, name, node string) (Departure, error) {
	pod, dsName, uid, err := ownerDaemonSet(ctx, client, namespace, name)
	if err != nil {
		if apierrors.IsForbidden(err) {
			return AccessRevoked, nil
		}
		return Stays, err
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, dsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return DaemonSetDeleted, nil
	case apierrors.IsForbidden(err):
		return AccessRevoked, nil
	case err != nil:
		return Stays, fmt.Errorf("DaemonSet %s/%s: %w", namespace, dsName, err)
	case removed(ds, uid):
		return DaemonSetDeleted, nil
	case pod.DeletionTimestamp == nil:
		return Stays, nil // a container restart: the pod stays on the node
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return Stays, fmt.Errorf("node %s, to match DaemonSet %s/%s's node selector: %w", node, namespace, dsName, err)
	}
	// The DaemonSet controller's test (NodeShouldRunDaemonPod) for the
	// template's nodeSelector and required node affinity. Its taint test is
	// left out: the chart tolerates every taint, and the controller adds
	// tolerations of its own to the pods, not to the template.
	match, err := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: ds.Spec.Template.Spec}).Match(n)
	if err != nil {
		return Stays, fmt.Errorf("DaemonSet %s/%s's node affinity: %w", namespace, dsName, err)
	}
	if !match {
		return NodeDeselected, nil
	}
	return Stays, nil
}

// DaemonSetWatch follows the DaemonSet that owns a pod, so that the pod
// knows it is being uninstalled even when, by the time it is told to
// stop, the API server no longer lets it ask (`kubectl delete -f` removes
// its RBAC right after the DaemonSet).
type DaemonSetWatch struct {
	removed atomic.Bool
	// uninstallingSince is UninstallingAnnotation's time on the DaemonSet
	// as last seen (nil: none).
	uninstallingSince atomic.Pointer[time.Time]
	// template is the DaemonSet's pod template as last seen.
	template atomic.Pointer[corev1.PodTemplateSpec]
}

// Removed is whether the watch saw the DaemonSet deleted or being deleted.
func (w *DaemonSetWatch) Removed() bool { return w.removed.Load() }

// Uninstalling is whether the DaemonSet, as last seen, is about to be
// deleted: it carries UninstallingAnnotation, set less than
// uninstallingFor ago. An annotation older than that is an uninstall that
// failed or was given up (or a pre-delete hook applied as a plain object):
// meshlet goes on as before.
func (w *DaemonSetWatch) Uninstalling() bool {
	since := w.uninstallingSince.Load()
	return since != nil && time.Since(*since) < uninstallingFor
}

// uninstallingFor bounds how long UninstallingAnnotation holds.
const uninstallingFor = 10 * time.Minute

// seen records the DaemonSet as it is now.
func (w *DaemonSetWatch) seen(ds *appsv1.DaemonSet) {
	w.template.Store(&ds.Spec.Template)
	var since *time.Time
	if v, ok := ds.Annotations[UninstallingAnnotation]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			since = &t
		}
	}
	w.uninstallingSince.Store(since)
}

// Keeps says whether the meshlet that follows on the node keeps the node
// taint taintKey and condition conditionType: the DaemonSet, as last seen,
// is neither deleted nor being uninstalled, and its template sets both
// alike. Before the DaemonSet is seen, and for a value the template takes
// from a ConfigMap or Secret, it is taken to.
func (w *DaemonSetWatch) Keeps(taintKey, conditionType string) bool {
	if w.Removed() || w.Uninstalling() {
		return false
	}
	t := w.Template()
	if t == nil {
		return true
	}
	taint, taintKnown := TemplateFlag(t, "node-taint")
	condition, conditionKnown := TemplateFlag(t, "node-condition")
	return (!taintKnown || taint == taintKey) && (!conditionKnown || condition == conditionType)
}

// Template is the DaemonSet's pod template as last seen: during an update,
// the next meshlet's (nil: not seen yet).
func (w *DaemonSetWatch) Template() *corev1.PodTemplateSpec { return w.template.Load() }

// WatchDaemonSet watches the DaemonSet owning the pod namespace/name until
// ctx ends, re-watching after errors. It returns at once; failures are
// logged.
func WatchDaemonSet(ctx context.Context, client kubernetes.Interface, namespace, name string) *DaemonSetWatch {
	w := &DaemonSetWatch{}
	logger := klog.FromContext(ctx)
	go func() {
		var dsName string
		var uid types.UID
		for backoff := time.Second; ctx.Err() == nil; backoff = min(2*backoff, time.Minute) {
			var err error
			if dsName == "" {
				_, dsName, uid, err = ownerDaemonSet(ctx, client, namespace, name)
			}
			if err == nil {
				err = w.watch(ctx, client, namespace, dsName, uid)
			}
			if w.Removed() || ctx.Err() != nil {
				return
			}
			logger.V(2).Info("Watching meshlet's DaemonSet (retrying)", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}()
	return w
}

// watch lists the DaemonSet, then follows it until it is removed, the
// watch ends or ctx does.
func (w *DaemonSetWatch) watch(ctx context.Context, client kubernetes.Interface, namespace, name string, uid types.UID) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := client.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return fmt.Errorf("DaemonSet %s/%s: %w", namespace, name, err)
	}
	var ds *appsv1.DaemonSet
	if len(list.Items) > 0 {
		ds = &list.Items[0]
	}
	if removed(ds, uid) {
		w.removed.Store(true)
		return nil
	}
	w.seen(ds)
	wi, err := client.AppsV1().DaemonSets(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return fmt.Errorf("watch DaemonSet %s/%s: %w", namespace, name, err)
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		d, _ := ev.Object.(*appsv1.DaemonSet)
		if ev.Type == watch.Deleted || (d != nil && removed(d, uid)) {
			w.removed.Store(true)
			return nil
		}
		if d != nil {
			w.seen(d)
		}
	}
	return fmt.Errorf("watch of DaemonSet %s/%s ended", namespace, name)
}
