package redirect

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// TestRemoveIstioRules: a pod istio-cni meshed holds its iptables chains
// (the nft variant: its rules are the iptables backend's, which writes
// Istio's rules verbatim) and, from Istio's nftables backend, tables of
// its own; beside them meshlet's table and rules of other parts of the
// node (a bystander chain and a masquerade). RemoveIstioRules takes out
// istio-cni's, and only them, in one go; a second call, or a pod without
// them, finds nothing to remove and changes nothing.
func TestRemoveIstioRules(t *testing.T) {
	h := podNetns(t)
	fd := netnstest.Fd(t, h)
	p, err := PlanFor([]netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}, enroll.Settings{DNSCapture: true}, true)
	must(t, err)
	ipt, err := newIptables(VariantNft, netnstest.Fd(t, netnstest.Open(t)))
	must(t, err)
	must(t, ipt.apply(context.Background(), fd, p)) // istio-cni's chains
	for _, args := range [][]string{
		{"iptables-nft", "-t", "nat", "-N", "KUBE-BYSTANDER"},
		{"iptables-nft", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-BYSTANDER"},
		{"iptables-nft", "-t", "nat", "-A", "POSTROUTING", "-j", "MASQUERADE"},
		{"ip6tables-nft", "-t", "mangle", "-A", "OUTPUT", "-j", "MARK", "--set-mark", "7"},
		{"nft", "add", "table", "inet", "istio-ambient-nat"},
		{"nft", "add", "chain", "inet", "istio-ambient-nat", "prerouting", "{ type nat hook prerouting priority dstnat; }"},
		{"nft", "add", "table", "inet", "istio-ambient-mangle"},
	} {
		inNetns(t, h, args[0], args[1:]...)
	}
	must(t, applyNftables(fd, p)) // meshlet's, written before istio-cni's go
	ours := nftTable(t, h)
	if save := inNetns(t, h, "iptables-nft-save"); !strings.Contains(save, "-A PREROUTING -j ISTIO_PRERT") {
		t.Fatalf("istio-cni's rules not in place for the test:\n%s", save)
	}

	removed, err := RemoveIstioRules(fd)
	must(t, err)
	for _, want := range []string{"table inet istio-ambient-nat", "table inet istio-ambient-mangle", "ip nat chain ISTIO_PRERT",
		"ip nat chain ISTIO_OUTPUT", "ip6 mangle chain ISTIO_PRERT", "ip raw PREROUTING: the jump to istio-cni's chain"} {
		if !slices.Contains(removed, want) {
			t.Errorf("RemoveIstioRules reported %q, which lacks %q", removed, want)
		}
	}
	for _, tool := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
		if save := inNetns(t, h, tool); strings.Contains(save, "ISTIO_") {
			t.Errorf("%s after RemoveIstioRules:\n%s", tool, save)
		}
	}
	for _, want := range []string{":KUBE-BYSTANDER - [0:0]", "-A PREROUTING -j KUBE-BYSTANDER", "-A POSTROUTING -j MASQUERADE"} {
		if save := inNetns(t, h, "iptables-nft-save", "-t", "nat"); !strings.Contains(counters.ReplaceAllString(save, "[0:0]"), want) {
			t.Errorf("another part's rule %q removed:\n%s", want, save)
		}
	}
	if save := inNetns(t, h, "ip6tables-nft-save", "-t", "mangle"); !strings.Contains(save, "-A OUTPUT -j MARK --set-xmark 0x7/0xffffffff") {
		t.Errorf("another part's rule removed:\n%s", save)
	}
	if tables := inNetns(t, h, "nft", "list", "tables"); strings.Contains(tables, "istio-ambient") {
		t.Errorf("istio-cni's tables left:\n%s", tables)
	}
	if got := nftTable(t, h); got != ours {
		t.Errorf("meshlet's table changed:\n%s\nwant:\n%s", got, ours)
	}

	before := fullDump(t, h)
	removed, err = RemoveIstioRules(fd)
	if err != nil || removed != nil {
		t.Fatalf("second RemoveIstioRules = %q, %v; want nothing to remove", removed, err)
	}
	if after := fullDump(t, h); after != before {
		t.Fatalf("a RemoveIstioRules with nothing to remove changed the pod:\n%s\nwas:\n%s", after, before)
	}
	bare := podNetns(t)
	if removed, err := RemoveIstioRules(netnstest.Fd(t, bare)); err != nil || removed != nil {
		t.Fatalf("RemoveIstioRules on a pod without rules = %q, %v", removed, err)
	}
	if tables := inNetns(t, bare, "nft", "list", "tables"); tables != "" {
		t.Fatalf("RemoveIstioRules created tables in a bare pod:\n%s", tables)
	}
}
