// Package enroll is meshlet's enrollment core: for every pod on the node it
// holds the desired and actual mesh state and drives the ports that change
// it (in-pod redirection rules, the ztunnel link, status reporting).
//
// Every entry point (today the NRI plugin and the Kubernetes watchers) feeds
// the same operations: Enroll a running pod, Release a stopping one, Forget
// a removed one, Reconcile to a full list of running pods; Reevaluate
// re-applies policy when its inputs change. Calls for one pod are serialised; calls for different
// pods run in parallel. Enrollment is all or nothing: a failed step undoes
// the earlier ones, so a pod is either fully meshed or not meshed at all.
//
// This package imports no NRI, CNI, DRA or client-go package (a test
// enforces it): adapters translate their world into Pod and call in.
package enroll
