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

// ownerDaemonSet returns the name and UID of the DaemonSet that controls
// the pod namespace/name.
func ownerDaemonSet(ctx context.Context, client kubernetes.Interface, namespace, name string) (string, types.UID, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("own pod %s/%s: %w", namespace, name, err)
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "DaemonSet" {
		return "", "", fmt.Errorf("own pod %s/%s is not controlled by a DaemonSet", namespace, name)
	}
	return owner.Name, owner.UID, nil
}

// removed is whether ds (nil: not found) is no longer the DaemonSet uid.
func removed(ds *appsv1.DaemonSet, uid types.UID) bool {
	return ds == nil || ds.UID != uid || ds.DeletionTimestamp != nil
}

// A Departure says why a stopping meshlet is its node's last: no meshlet
// of its DaemonSet will serve the node after it, so it takes its state off
// the node (an uninstall on that node). Stays, on an update, a restart, a
// drain or a node shutdown, keeps everything for the next meshlet.
type Departure string

const (
	Stays Departure = ""
	// DaemonSetDeleted: the DaemonSet is deleted or being deleted (helm
	// uninstall, kubectl delete), or replaced by another of that name.
	DaemonSetDeleted Departure = "meshlet's DaemonSet is deleted"
	// NodeDeselected: the DaemonSet's node selector or required node
	// affinity no longer matches the node (its labels changed, or the
	// DaemonSet's selector did): the DaemonSet controller deletes the pod
	// and starts none there.
	NodeDeselected Departure = "meshlet's DaemonSet no longer selects this node"
	// AccessRevoked: the API server refuses meshlet's own pod or DaemonSet
	// to meshlet's service account (Forbidden or Unauthorized). Only an
	// uninstall takes meshlet's role binding or account away (kubectl
	// delete -f deletes them beside the DaemonSet, in any order): a meshlet
	// that stayed would leave the node fail-closed with no one to open it.
	AccessRevoked Departure = "the API server refuses meshlet's service account: its role binding or account is deleted"
)

// Departing tells whether the meshlet of pod namespace/name, on node, is
// its node's last (see Departure). A pod without a DaemonSet owner, a pod
// or node that is already gone, or any other error says nothing: Stays,
// with err saying why, so that the caller keeps what it installed.
func Departing(ctx context.Context, client kubernetes.Interface, namespace, name, node string) (Departure, error) {
	revoked := func(err error) bool { return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) }
	dsName, uid, err := ownerDaemonSet(ctx, client, namespace, name)
	if err != nil {
		if revoked(err) {
			return AccessRevoked, nil
		}
		return Stays, err
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, dsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return DaemonSetDeleted, nil
	case revoked(err):
		return AccessRevoked, nil
	case err != nil:
		return Stays, fmt.Errorf("DaemonSet %s/%s: %w", namespace, dsName, err)
	case removed(ds, uid):
		return DaemonSetDeleted, nil
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return Stays, fmt.Errorf("node %s, to match DaemonSet %s/%s's node selector: %w", node, namespace, dsName, err)
	}
	// The DaemonSet controller's own test (NodeShouldRunDaemonPod): the
	// template's nodeSelector and required node affinity.
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
}

// Removed is whether the watch saw the DaemonSet deleted or being deleted.
func (w *DaemonSetWatch) Removed() bool { return w.removed.Load() }

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
				dsName, uid, err = ownerDaemonSet(ctx, client, namespace, name)
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
	}
	return fmt.Errorf("watch of DaemonSet %s/%s ended", namespace, name)
}
