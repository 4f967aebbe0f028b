// Package cri lists the pods running on the node from the container
// runtime's CRI API (containerd, CRI-O). Both modes need the list: on a
// runtime without NRI, meshlet learns about new pods from its chained CNI
// plugin, but the pods that were running before meshlet started (or while
// it was away) are known only to the runtime; and in NRI mode a runtime
// that restarted never sends the removal of the pods it ran before. They
// are read from the CRI, never from a /proc scan: the runtime knows which
// sandboxes are pods, their UIDs and their network namespaces.
//
// The daemon dials the runtime once (Dial, or Find for an unset
// --cri-socket), then calls RunningPods at start and whenever it
// reconciles, and hands the list to the core's Reconcile, the call NRI's
// Synchronize makes.
//
// Reconcile treats every pod absent from the list as gone, so the list
// holds exactly the sandboxes in state SANDBOX_READY. A NOTREADY sandbox
// (stopped, or its shim died) is left out on purpose: its network
// namespace is being torn down or is gone, and the core must release the
// pod. Two outcomes keep the list honest:
//
//   - A nil list and an error: the runtime could not be listed. Reconciling
//     with nothing would release running pods, so the daemon must not
//     reconcile; it retries later.
//   - A list (possibly empty, never nil) and the UIDs of ready sandboxes
//     left out of it, with an error naming them: their status could not be
//     read, or they cannot be enrolled (no network namespace path reported
//     for a pod network). They are running: the daemon must not take them
//     for gone.
//
// A sandbox removed between the list and its status is skipped silently.
// A sandbox whose RunPodSandbox is still in progress (its CNI ADD running)
// is not listed yet: containerd adds it to its store only once the network
// is set up. The daemon must not let a reconcile with a list taken before
// that ADD completed forget the pod the ADD enrolled.
package cri
