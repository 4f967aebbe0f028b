// Package nriplugin is meshlet's NRI plugin: it hooks the container
// runtime's pod-sandbox lifecycle (containerd ≥ 1.7, CRI-O ≥ 1.26) and
// feeds the enrollment core.
//
//   - RunPodSandbox: the netns exists and CNI has run; the pod is enrolled
//     synchronously, bounded by the enroll timeout (below the runtime's 2 s
//     request timeout, which would drop the plugin and let the pod start
//     unmeshed). A pod that must be meshed and cannot be fails the sandbox;
//     kubelet retries.
//   - StopPodSandbox: Release (never enters the netns; on CRI-O it is gone).
//   - RemovePodSandbox: Forget. The runtime does not always send the stop
//     and removal (containerd after its own restart): the daemon also
//     lists the runtime's pods over CRI and forgets pods gone unreported.
//   - Synchronize (on every connect): Reconcile with the running pods; pods
//     started while meshlet was away are enrolled late, and counted.
//   - CreateContainer: a gate that refuses an app container of a pod that
//     must be meshed and is not (fail closed).
//
// Run reconnects when the runtime goes away (restart, upgrade), with a
// backoff that resets after a stable connection.
package nriplugin
