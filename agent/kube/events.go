package kube

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Events records pod events. client-go's recorder aggregates and
// rate-limits them per pod and reason (a burst of 25, then one every five
// minutes), so a pod failing in a loop cannot flood the API.
type Events struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

// NewEvents starts an event broadcaster writing through client.
func NewEvents(client kubernetes.Interface, nodeName string) *Events {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Events{broadcaster: b,
		recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "meshlet", Host: nodeName})}
}

// EnrollFailed records a warning on the pod: why it could not join the mesh.
func (e *Events) EnrollFailed(pod enroll.PodRef, err error) {
	step := string(enroll.FailedStep(err))
	if step == "" {
		step = "other"
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	e.recorder.Eventf(ref, corev1.EventTypeWarning, "MeshEnrollFailed", "Pod could not join the mesh (step %s): %v", step, err)
}

// ZtunnelRefused records a warning on a running pod whose handover ztunnel
// refused: its redirection stays, and meshlet retries the handover.
func (e *Events) ZtunnelRefused(pod enroll.PodRef, reason string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	e.recorder.Eventf(ref, corev1.EventTypeWarning, "MeshZtunnelRefused",
		"ztunnel refused the running pod (%s): its traffic stays redirected, and meshlet hands it to ztunnel again until it takes it", reason)
}

// EnrollRetrying records a warning on a running pod whose convergence
// failed: it keeps what it had (its rules, its place at ztunnel), and
// meshlet tries again.
func (e *Events) EnrollRetrying(pod enroll.PodRef, attempt int, next time.Duration, err error) {
	step := string(enroll.FailedStep(err))
	if step == "" {
		step = "other"
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	e.recorder.Eventf(ref, corev1.EventTypeWarning, "MeshEnrollRetrying",
		"Running pod could not be converged (attempt %d, step %s): %v; it keeps its redirection as it was, and meshlet tries again in %v", attempt, step, err, next)
}

// Shutdown flushes and stops the broadcaster.
func (e *Events) Shutdown() { e.broadcaster.Shutdown() }

// InvalidSettings records a warning on a ConfigMap of node settings that
// meshlet could not use: why, and what applies instead. Each node's
// meshlet records its own (the event's source names the node).
func (e *Events) InvalidSettings(ref ObjectRef, uid types.UID, err error) {
	obj := &corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: uid}
	e.recorder.Eventf(obj, corev1.EventTypeWarning, "InvalidNodeSettings", "Node settings not applied: %v", err)
}
