// Package cnifallback is meshlet's CNI mode, for runtimes without NRI: a
// tiny chained CNI plugin (shim, cmd/meshlet-cni) forwards each pod's ADD
// and DEL over a Unix socket (wire) to the agent (server), which turns
// them into the core's Enroll and Forget; the installer (install) keeps
// the plugin last in the runtime's conflist and puts it back when the
// primary CNI rewrites the file; the runtime's CRI API (cri) lists the
// pods already running. Fallback ties them together in the daemon.
package cnifallback
