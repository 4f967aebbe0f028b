// Package env runs a real container runtime for meshlet's tests (the
// end-to-end tier and any package whose test needs a runtime) and its
// demos: containerd 2.x with NRI, runc and the CNI bridge plugin, on
// private paths (never the host's /run/containerd or /var/lib/containerd),
// inside a network namespace of its own so the machine's network is never
// touched, with a sandbox image built here (no registry).
//
// Processes join the namespace with nsenter --net, not ip netns exec, which
// remounts /sys in a new mount namespace and hides the cgroup mounts runc
// needs.
//
// The test environments are all under test/env: this package (the node: a
// runtime and meshlet), kubeenv (etcd and kube-apiserver), clusterenv (a
// single-node cluster on the runtime), and the install-*.sh scripts that
// build the third-party binaries they run, cached by version.
package env
