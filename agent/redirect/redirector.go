package redirect

import "context"

// Backend names an in-pod rule backend.
type Backend string

const (
	BackendNftables Backend = "nftables"
	BackendIptables Backend = "iptables"
)

// IptablesVariant selects iptables-nft or iptables-legacy.
type IptablesVariant string

const (
	VariantAuto   IptablesVariant = "auto"
	VariantNft    IptablesVariant = "nft"
	VariantLegacy IptablesVariant = "legacy"
)

// Config configures a Redirector.
type Config struct {
	Backend Backend
	// IptablesVariant applies to the iptables backend; auto picks the
	// variant holding the node's rules (kubelet's, the CNI's).
	IptablesVariant IptablesVariant
	// IPv6 programs IPv6 redirection for pods with IPv6 addresses (Istio's
	// default: on). Off, a pod with only IPv6 addresses cannot be enrolled.
	// It is the setting New starts with; SetIPv6 changes it.
	IPv6 bool
	// HostNetnsFd is the node's network namespace for probe SNAT; -1 (the
	// default via New) means the agent's own. Tests pass a namespace of
	// their own so the real node is never touched.
	HostNetnsFd int
	// Instance names this meshlet's node-side objects when several run on
	// a node (one per Istio revision): empty, meshlet's own names; else
	// names of their own (nodeNames), at most MaxInstanceLen characters.
	Instance string
}

// DefaultConfig is nftables, IPv6 on, with the agent's own netns as the
// node's.
func DefaultConfig() Config {
	return Config{Backend: BackendNftables, IptablesVariant: VariantAuto, IPv6: true, HostNetnsFd: -1}
}

// podBackend programs the in-pod filter rules (routing is common).
type podBackend interface {
	apply(ctx context.Context, netnsFd int, p Plan) error
	remove(ctx context.Context, netnsFd int) error
	// present reports whether meshlet's rules are in the netns, where that
	// can be checked cheaply; false means "rewrite them".
	present(netnsFd int) (bool, error)
}
