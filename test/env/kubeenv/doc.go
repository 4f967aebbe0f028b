// Package kubeenv runs a real etcd and kube-apiserver on loopback for
// meshlet's API tests: random ports, private directories, an admin token,
// RBAC on, and a clean teardown. No controllers, scheduler or kubelet run:
// tests create what those would (service accounts, pods already bound).
package kubeenv
