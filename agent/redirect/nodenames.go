package redirect

// TableName is the nftables table meshlet owns, in the pod's netns (family
// inet) and on the node (family inet, for probe SNAT; an instance's has a
// name of its own: nodeNames). Nothing else in a netns is ever touched.
const TableName = "meshlet"

// MaxInstanceLen is the longest Config.Instance: MESHLET_<instance> is an
// iptables chain, whose names have 28 characters at most (and
// meshlet-v4-<instance> an ipset, 31).
const MaxInstanceLen = 20

// nodeNames name meshlet's objects on the node (the probe SNAT): each
// meshlet on the node (Config.Instance) has its own, so that one's
// start-up, clean-up or uninstall never touches another's.
type nodeNames struct {
	// table is the nftables table (family inet).
	table string
	// ipset4, ipset6 and chain are the iptables backend's sets and nat
	// chain.
	ipset4, ipset6, chain string
}

// nodeNames returns c.Instance's names: meshlet's own without one.
func (c Config) nodeNames() nodeNames {
	if c.Instance == "" {
		return nodeNames{table: TableName, ipset4: "meshlet-probes-v4", ipset6: "meshlet-probes-v6", chain: "MESHLET_POSTRT"}
	}
	// meshlet-v4-<instance> can never be meshlet-probes-v4, whatever the
	// instance is called.
	return nodeNames{table: "meshlet-" + c.Instance, ipset4: "meshlet-v4-" + c.Instance,
		ipset6: "meshlet-v6-" + c.Instance, chain: "MESHLET_" + c.Instance}
}
