// Package env runs a real container runtime for meshlet's end-to-end tests
// and demo: containerd 2.x with NRI, runc and the CNI bridge plugin, on
// private paths (never the host's /run/containerd or /var/lib/containerd),
// inside a network namespace of its own so the machine's network is never
// touched, with a sandbox image built here (no registry).
//
// Processes join the namespace with nsenter --net, not ip netns exec, which
// remounts /sys in a new mount namespace and hides the cgroup mounts runc
// needs.
package env
