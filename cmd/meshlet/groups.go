package main

// flagGroup is an area of meshlet's flags, as meshlet --help lists them.
type flagGroup struct {
	title string
	flags []string
}

// flagGroups are every flag of the daemon, by area. A flag that is in no
// group fails TestFlagGroups: add it where an operator would look.
var flagGroups = []flagGroup{
	{"Node and API server", []string{"node-name", "kubeconfig", "standalone", "pod-name", "pod-namespace", "config-map", "node-taint", "node-condition", "unmesh-on-uninstall"}},
	{"Runtime hook", []string{"mode", "nri-socket", "nri-plugin-index", "enroll-timeout", "cri-socket", "cri-resync-interval", "skip-pod-ip-check"}},
	{"Ztunnel", []string{"ztunnel-socket", "ztunnel-snapshot-hold"}},
	{"In-pod rules", []string{"redirect-backend", "iptables-variant", "ipv6", "dns-capture"}},
	{"Policy", []string{"dataplane-mode-label", "excluded-namespaces", "denied-runtime-handlers", "revision", "revisionless-pods"}},
	{"DRA and container gate", []string{"dra", "dra-driver-name", "dra-slots", "pod-uid", "gate", "gate-socket", "gate-timeout", "gate-hook-binary"}},
	{"CNI mode", []string{"cni-socket", "cni-plugin-binary", "cni-own-conflist", "remove-istio-cni-plugin"}},
	{"Observability", []string{"health-addr", "health-socket", "metrics-addr", "v", "vmodule", "log-format"}},
	{"Paths", []string{"state-dir", "kubelet-root-dir", "cdi-spec-dir", "gate-hook-dir", "cni-conf-dir", "cni-bin-dir"}},
}
