package kube

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
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

// DaemonSetRemoved reports whether the DaemonSet that owns the pod
// namespace/name is deleted or being deleted: meshlet is being
// uninstalled, not updated (a rolling update replaces the pod and keeps
// the DaemonSet). A pod without a DaemonSet owner, or a pod that is
// already gone, says nothing about the DaemonSet: removed is false and
// err says why, so the caller keeps what it installed.
func DaemonSetRemoved(ctx context.Context, client kubernetes.Interface, namespace, name string) (bool, error) {
	dsName, uid, err := ownerDaemonSet(ctx, client, namespace, name)
	if err != nil {
		return false, err
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, dsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("DaemonSet %s/%s: %w", namespace, dsName, err)
	}
	return removed(ds, uid), nil
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
