package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DaemonSetRemoved reports whether the DaemonSet that owns the pod
// namespace/name is deleted or being deleted: meshlet is being
// uninstalled, not updated (a rolling update replaces the pod and keeps
// the DaemonSet). A pod without a DaemonSet owner, or a pod that is
// already gone, says nothing about the DaemonSet: removed is false and
// err says why, so the caller keeps what it installed.
func DaemonSetRemoved(ctx context.Context, client kubernetes.Interface, namespace, name string) (removed bool, err error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("own pod %s/%s: %w", namespace, name, err)
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "DaemonSet" {
		return false, fmt.Errorf("own pod %s/%s is not controlled by a DaemonSet", namespace, name)
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("DaemonSet %s/%s: %w", namespace, owner.Name, err)
	case ds.UID != owner.UID || ds.DeletionTimestamp != nil:
		return true, nil // replaced by a new DaemonSet of that name, or going
	}
	return false, nil
}
