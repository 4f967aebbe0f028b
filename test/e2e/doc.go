// Package e2e drives a real containerd 2.x (NRI on), runc and the CNI
// bridge plugin through the CRI API (the runtime's gRPC service, as the
// kubelet calls it; crictl for the rest), with the meshlet daemon as a
// separate process and a ztunnel stand-in (agent/zds/zdstest: ztunnel is
// Rust and cannot run here) on its ZDS socket.
package e2e
