package redirect

import (
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// TestCheckChangesNothing: Check passes for each backend on a node where
// it can run and leaves the node's rules as they were (a standby meshlet
// runs it next to the serving one); an unknown backend is refused.
func TestCheckChangesNothing(t *testing.T) {
	node := netnstest.Open(t)
	fd := netnstest.Fd(t, node)
	before := inNetns(t, node, "nft", "list", "ruleset")
	for _, cfg := range []Config{
		{Backend: BackendNftables, HostNetnsFd: fd},
		{Backend: BackendIptables, IptablesVariant: VariantNft, HostNetnsFd: fd},
		{Backend: BackendIptables, IptablesVariant: VariantLegacy, HostNetnsFd: fd},
		{Backend: BackendIptables, IptablesVariant: VariantAuto, HostNetnsFd: fd},
	} {
		if err := Check(cfg); err != nil {
			t.Errorf("Check(%s %s): %v", cfg.Backend, cfg.IptablesVariant, err)
		}
	}
	if after := inNetns(t, node, "nft", "list", "ruleset"); after != before {
		t.Errorf("Check changed the node's rules:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if out := inNetns(t, node, "iptables-legacy-save"); strings.Contains(out, "MESHLET") {
		t.Errorf("Check left legacy rules:\n%s", out)
	}
	if err := Check(Config{Backend: "ebpf", HostNetnsFd: fd}); err == nil || !strings.Contains(err.Error(), `unknown redirect backend "ebpf"`) {
		t.Errorf("Check(ebpf) = %v, want it refused", err)
	}
}
