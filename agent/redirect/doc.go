// Package redirect programs in-pod traffic redirection to ztunnel, as
// Istio's ambient node agent does (Istio ≥ 1.24, REDIRECT mode), and the
// node-side SNAT that lets kubelet probes bypass it.
//
// Two backends produce the same behaviour:
//   - nftables (default): one table, "inet meshlet", written in-process over
//     netlink in a single atomic batch per pod: the pod has every rule or
//     none. No nft or iptables binary is executed.
//   - iptables: rules identical, after normalisation, to Istio's
//     ISTIO_PRERT/ISTIO_OUTPUT chains in the mangle, nat and raw tables,
//     applied with iptables-restore --noflush inside the pod's netns, in the
//     variant (nft or legacy) the node uses.
//
// Both add the routing Istio relies on: fwmark 0x111/0xfff → table 100,
// where every address is local via lo.
//
// Release never needs the pod's netns: rules die with it. Remove with
// RemoveAll is for pods that keep running (opt-out) and enters the netns
// through the fd the core holds, so it works even after the runtime has
// unmounted the netns path.
package redirect
