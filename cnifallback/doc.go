// Package cnifallback groups the CNI fallback for runtimes without NRI: a
// tiny chained CNI plugin (shim) that forwards ADD/DEL to the agent over a
// Unix socket (wire, server) and an installer that keeps it chained in the
// node's conflist (install). The pods already running when meshlet starts
// come from the runtime's CRI API (cri). The plugin (shim,
// cmd/meshlet-cni), the protocol (wire), the agent's side (server) and the
// CRI lister (cri) are built; the daemon does not start the server or use
// the lister yet and the installer is not built, so on a runtime without
// NRI meshlet does not enroll pods yet.
package cnifallback
