package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/agent/enroll"
)

// LookupPod returns a pod of this node as the runtime hook will see it,
// and its policy inputs, from the informer's cache or, for a pod not seen
// yet, one GET. found is false for a pod that is gone or being deleted.
// Unlike Resolve it does not degrade: a claim is prepared only for a pod
// the API server knows.
func (w *Watcher) LookupPod(ctx context.Context, namespace, name, uid string) (_ enroll.Pod, _ enroll.PodInfo, found bool, _ error) {
	pod := enroll.Pod{UID: uid, Name: name, Namespace: namespace}
	apiPod, err := w.podList.Pods(namespace).Get(name)
	if err != nil || string(apiPod.UID) != uid {
		apiPod, err = w.get(ctx, &pod)
		if apierrors.IsNotFound(err) {
			return pod, enroll.PodInfo{}, false, nil
		}
		if err != nil {
			return pod, enroll.PodInfo{}, false, err
		}
	}
	if apiPod.DeletionTimestamp != nil {
		return pod, enroll.PodInfo{}, false, nil
	}
	pod.Labels, pod.Annotations = nonNil(apiPod.Labels), nonNil(apiPod.Annotations)
	pod.HostNetwork = apiPod.Spec.HostNetwork
	handler, err := w.runtimeHandler(ctx, apiPod.Spec.RuntimeClassName)
	if err != nil {
		return pod, enroll.PodInfo{}, false, err
	}
	pod.RuntimeHandler = handler
	return pod, w.infoOf(apiPod, pod.Namespace), true, nil
}

// runtimeHandler is the handler of a RuntimeClass ("" without one): the
// runtime hook sees the handler, the pod spec names the class.
func (w *Watcher) runtimeHandler(ctx context.Context, class *string) (string, error) {
	if class == nil || *class == "" {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.GetTimeout)
	defer cancel()
	rc, err := w.client.NodeV1().RuntimeClasses().Get(ctx, *class, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("runtime class %s: %w", *class, err)
	}
	return rc.Handler, nil
}

// RequestReevaluation asks for a re-evaluation of every known pod, merged
// with label changes into one (debounced) pass: a new per-pod setting
// source (a claim prepared for a running pod) changed.
func (w *Watcher) RequestReevaluation() { w.notify() }
