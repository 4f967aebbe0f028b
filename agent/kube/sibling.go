package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// SiblingOnNode returns the name of another running pod of the same
// DaemonSet as the pod namespace/name on nodeName: during a surge update,
// the previous meshlet this one replaces. "" with a nil error: there is
// none (whatever holds the node lock is not meshlet's previous pod).
func SiblingOnNode(ctx context.Context, client kubernetes.Interface, namespace, name, nodeName string) (string, error) {
	_, _, uid, err := ownerDaemonSet(ctx, client, namespace, name)
	if err != nil {
		return "", err
	}
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String()})
	if err != nil {
		return "", fmt.Errorf("pods on node %s in %s: %w", nodeName, namespace, err)
	}
	for _, p := range pods.Items {
		owner := metav1.GetControllerOf(&p)
		if p.Name != name && owner != nil && owner.UID == uid && p.Status.Phase == corev1.PodRunning {
			return p.Name, nil
		}
	}
	return "", nil
}
