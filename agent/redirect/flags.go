package redirect

import (
	"flag"

	"github.com/meshlet/meshlet/internal/flagvalue"
)

// AddFlags registers the in-pod rules settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.Var(flagvalue.NewEnum(&c.Backend, "redirect backend", BackendNftables, BackendIptables),
		"redirect-backend", "in-pod rules: nftables or iptables")
	fs.Var(flagvalue.NewEnum(&c.IptablesVariant, "iptables variant", VariantAuto, VariantNft, VariantLegacy),
		"iptables-variant", "with --redirect-backend=iptables: auto (match the node), nft or legacy")
	fs.BoolVar(&c.IPv6, "ipv6", c.IPv6, "program IPv6 redirection for pods with IPv6 addresses")
}
