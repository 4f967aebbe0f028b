// Package kube will hold the Kubernetes adapters: informers for this node's
// pods and for namespaces (the core's PodInfoResolver), live label changes
// feeding Reevaluate, the ambient.istio.io/redirection status patch (the
// core's StatusReporter) and pod events.
package kube
