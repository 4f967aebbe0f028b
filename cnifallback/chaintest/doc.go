// Package chaintest proves meshlet's CNI fallback with real parts: the
// meshlet-cni binary chained after the CNI bridge and host-local plugins,
// run by libcni as a container runtime runs a conflist, in a network
// namespace standing for the node, against an agent in the test process
// (the real enrollment core, nftables redirector, ZDS server with a
// ztunnel stand-in connected, and the CNI server). It holds only tests and
// a benchmark (Linux, root). The interface plugins are Debian's
// (/usr/lib/cni, as the e2e runtime uses) and, for the spec versions those
// do not speak, upstream's, which install.sh builds.
package chaintest
