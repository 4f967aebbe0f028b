// Package cnifallback groups the CNI fallback for runtimes without NRI: a
// tiny chained CNI plugin (shim) that forwards ADD/DEL to the agent over a
// Unix socket (wire, server) and an installer that keeps it chained in the
// node's conflist (install). The plugin (shim, cmd/meshlet-cni), the
// protocol (wire), the agent's side (server) and the installer (install)
// are built; the daemon starts neither the server nor the installer yet,
// so on a runtime without NRI meshlet does not enroll pods yet.
package cnifallback
