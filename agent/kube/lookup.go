package kube

import (
	"context"
	"errors"

	"github.com/meshlet/meshlet/agent/enroll"
)

// LookupPod returns a pod of this node as the runtime hook will see it,
// and its policy inputs, from the informer's cache or, for a pod not seen
// yet, one GET. Unlike Resolve it does not degrade: a claim is prepared
// only for a pod the API server knows.
func (w *Watcher) LookupPod(ctx context.Context, namespace, name, uid string) (enroll.Pod, enroll.PodInfo, error) {
	pod := enroll.Pod{UID: uid, Name: name, Namespace: namespace}
	apiPod, err := w.podList.Pods(namespace).Get(name)
	if err != nil || string(apiPod.UID) != uid {
		if apiPod, err = w.get(ctx, &pod); err != nil {
			return pod, enroll.PodInfo{}, err
		}
	}
	if apiPod.DeletionTimestamp != nil {
		return pod, enroll.PodInfo{}, errors.New("the pod is being deleted")
	}
	pod.Labels, pod.Annotations = nonNil(apiPod.Labels), nonNil(apiPod.Annotations)
	pod.HostNetwork = apiPod.Spec.HostNetwork
	info, err := w.Resolve(ctx, &pod)
	return pod, info, err
}

// RequestReevaluation asks for a re-evaluation of every known pod, merged
// with label changes into one (debounced) pass: a new per-pod setting
// source (a claim prepared for a running pod) changed.
func (w *Watcher) RequestReevaluation() { w.notify() }
