// Package cnifallback groups the CNI fallback for runtimes without NRI: a
// tiny chained CNI plugin (shim) that forwards ADD/DEL to the agent over a
// Unix socket (wire, server) and an installer that keeps it chained in the
// node's conflist (install). Not built yet: on a runtime without NRI,
// meshlet does not enroll pods today.
package cnifallback
