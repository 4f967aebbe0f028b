// Package gate is meshlet's container gate: an OCI createRuntime hook
// that the mesh device's CDI spec adds to each container that asked for
// the mesh (referencing the mesh claim, or requesting the extended
// resource). The runtime runs
// it once per container start, before the container's process runs, with
// the container's OCI state on stdin. The hook finds the pod's network
// namespace (/proc/<pid>/ns/net of the container's init) and asks the
// meshlet on the node, over a local SEQPACKET socket, whether a pod in
// that namespace is enrolled. It exits non-zero, and the runtime refuses
// the container, when the answer is no or when meshlet does not answer
// within the deadline: a mesh pod whose enrollment did not happen (the
// runtime hook disconnected, meshlet down, an unknown sandbox) never runs
// its containers outside the mesh, whatever the runtime's NRI
// configuration says.
//
// The package is the hook (Main, for cmd/meshlet-gate) and the wire both
// sides speak. It takes the standard library only: the hook is a small
// static binary copied to the host.
package gate
