// Package redirect will hold the in-pod traffic redirection the core's
// Redirector port drives: nftables (in-process netlink, one atomic batch
// per pod) and Istio-identical iptables backends, the fwmark routing rule,
// and the host-side SNAT of kubelet probes. Linux-only code lives in
// _linux.go files.
package redirect
