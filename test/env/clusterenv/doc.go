// Package clusterenv turns the end-to-end environment (a containerd with
// NRI in a network namespace of its own, test/env) into a real
// single-node Kubernetes cluster: etcd and kube-apiserver (test/env/kubeenv), then
// kube-controller-manager, kube-scheduler and a kubelet, all inside that
// namespace and on private paths, and tears it all down, undoing what the
// kubelet changes on the machine. Linux only; it needs root.
package clusterenv
