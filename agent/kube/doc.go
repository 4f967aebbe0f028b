// Package kube connects meshlet to the Kubernetes API server:
//
//   - Watcher: informers for this node's pods (field selector spec.nodeName)
//     and for namespaces; the core's PodInfoResolver (service account,
//     current pod labels and annotations, namespace labels), falling back to
//     a bounded GET for a pod the informer has not seen yet and degrading to
//     the last known state when the API is unreachable, never hanging a
//     runtime hook; label changes trigger the core's Reevaluate.
//   - StatusPatcher: the core's StatusReporter; merge-patches the pod's
//     status subresource with ambient.istio.io/redirection (pending,
//     enabled, removed), asynchronously, with retries and a UID precondition.
//   - Events: rate-limited pod events for enrollment failures.
package kube
