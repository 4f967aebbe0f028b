package redirect

import (
	"testing"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// TestDetectVariant: auto picks the variant that holds the node's rules
// (kubelet's and the CNI's), so pod rules live where the node's do.
func TestDetectVariant(t *testing.T) {
	empty := netnstest.Open(t)
	if v := detectVariant(netnstest.Fd(t, empty)); v != VariantNft {
		t.Fatalf("node without rules: %s, want nft", v)
	}
	legacy := netnstest.Open(t)
	inNetns(t, legacy, "iptables-legacy", "-t", "nat", "-A", "POSTROUTING", "-s", "10.0.0.0/8", "-j", "MASQUERADE")
	inNetns(t, legacy, "iptables-legacy", "-A", "FORWARD", "-j", "ACCEPT")
	if v := detectVariant(netnstest.Fd(t, legacy)); v != VariantLegacy {
		t.Fatalf("node with legacy rules: %s, want legacy", v)
	}
	nft := netnstest.Open(t)
	inNetns(t, nft, "iptables-nft", "-A", "FORWARD", "-j", "ACCEPT")
	if v := detectVariant(netnstest.Fd(t, nft)); v != VariantNft {
		t.Fatalf("node with nft rules: %s, want nft", v)
	}
	cfg := Config{Backend: BackendIptables, IptablesVariant: VariantAuto, HostNetnsFd: netnstest.Fd(t, legacy)}
	r, err := New(cfg)
	must(t, err)
	defer func() { must(t, r.host.Uninstall()) }()
	if got := r.backend.(*iptablesBackend).variant; got != VariantLegacy {
		t.Fatalf("New with auto on a legacy node chose %s", got)
	}
}
