// Package cnifallback groups the CNI fallback for runtimes without NRI: a
// tiny chained CNI plugin (shim) that forwards ADD/DEL to the agent over a
// Unix socket (wire, server) and an installer that keeps it chained in the
// node's conflist (install). The plugin (shim, cmd/meshlet-cni) and the
// protocol (wire) are built; the agent's server and the installer are
// not, so on a runtime without NRI meshlet does not enroll pods yet.
package cnifallback
