package redirect

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// TestRemovingIstioRules: a pod istio-cni meshed holds its iptables chains
// (the nft variant: its rules are the iptables backend's, which writes
// Istio's rules verbatim) and, from Istio's nftables backend, tables of
// its own; beside them meshlet's table and rules of other parts of the
// node (a bystander chain and a masquerade). removeIstioRules takes out
// istio-cni's, and only them, in one go; a second call, or a pod without
// them, finds nothing to remove and changes nothing.
func TestRemovingIstioRules(t *testing.T) {
	h := podNetns(t)
	fd := netnstest.Fd(t, h)
	p, err := PlanFor([]netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}, enroll.Settings{DNSCapture: true}, true)
	must(t, err)
	istioCniRules(t, h, p)
	for _, args := range [][]string{
		{"iptables-nft", "-t", "nat", "-N", "KUBE-BYSTANDER"},
		{"iptables-nft", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-BYSTANDER"},
		{"iptables-nft", "-t", "nat", "-A", "POSTROUTING", "-j", "MASQUERADE"},
		{"ip6tables-nft", "-t", "mangle", "-A", "OUTPUT", "-j", "MARK", "--set-mark", "7"},
	} {
		inNetns(t, h, args[0], args[1:]...)
	}
	must(t, applyNftables(fd, p)) // meshlet's, written before istio-cni's go
	ours := nftTable(t, h)
	if save := inNetns(t, h, "iptables-nft-save"); !strings.Contains(save, "-A PREROUTING -j ISTIO_PRERT") {
		t.Fatalf("istio-cni's rules not in place for the test:\n%s", save)
	}

	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	if has, err := HasIstioRules(path); err != nil || !has {
		t.Fatalf("HasIstioRules of a pod istio-cni meshed = %v, %v", has, err)
	}
	removed, err := removeIstioRules(fd, true)
	must(t, err)
	if has, err := HasIstioRules(path); err != nil || has {
		t.Fatalf("HasIstioRules after their removal = %v, %v", has, err)
	}
	for _, want := range []string{"table inet istio-ambient-nat", "table inet istio-ambient-mangle",
		"ip nat: chains ISTIO_PRERT, ISTIO_OUTPUT and 2 jumps", "ip6 mangle: chains ISTIO_PRERT, ISTIO_OUTPUT and 2 jumps"} {
		if !slices.Contains(removed, want) {
			t.Errorf("removeIstioRules reported %q, which lacks %q", removed, want)
		}
	}
	for _, tool := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
		if save := inNetns(t, h, tool); strings.Contains(save, "ISTIO_") {
			t.Errorf("%s after removeIstioRules:\n%s", tool, save)
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
	removed, err = removeIstioRules(fd, true)
	if err != nil || removed != nil {
		t.Fatalf("second removeIstioRules = %q, %v; want nothing to remove", removed, err)
	}
	if after := fullDump(t, h); after != before {
		t.Fatalf("a removeIstioRules with nothing to remove changed the pod:\n%s\nwas:\n%s", after, before)
	}
	bare := podNetns(t)
	if removed, err := removeIstioRules(netnstest.Fd(t, bare), true); err != nil || removed != nil {
		t.Fatalf("removeIstioRules on a pod without rules = %q, %v", removed, err)
	}
	if tables := inNetns(t, bare, "nft", "list", "tables"); tables != "" {
		t.Fatalf("removeIstioRules created tables in a bare pod:\n%s", tables)
	}
}

// istioCniRules writes in the pod h what istio-cni would for plan p: its
// iptables chains (nft variant), which are what meshlet's iptables backend
// writes, and tables of its nftables backend.
func istioCniRules(t *testing.T, h *netns.Handle, p Plan) {
	t.Helper()
	ipt, err := newIptables(VariantNft, netnstest.Fd(t, netnstest.Open(t)))
	must(t, err)
	must(t, ipt.apply(context.Background(), netnstest.Fd(t, h), p))
	for _, args := range [][]string{
		{"nft", "add", "table", "inet", "istio-ambient-nat"},
		{"nft", "add", "chain", "inet", "istio-ambient-nat", "prerouting", "{ type nat hook prerouting priority dstnat; }"},
		{"nft", "add", "table", "inet", "istio-ambient-mangle"},
	} {
		inNetns(t, h, args[0], args[1:]...)
	}
}

// TestTakingOverFromIstioCni: a running pod meshlet enrolls without a
// record of its own (w.Running) may be istio-cni's. With each backend,
// meshlet's rules go in and then istio-cni's that are not meshlet's own go
// out (with the nft variant of the iptables backend, Istio's chains are
// meshlet's, rewritten in place: the jumps to them stay single). A pod
// enrolled in a runtime's hook is not looked at; Remove with RemoveAll
// takes istio-cni's rules out with meshlet's.
func TestTakingOverFromIstioCni(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	settings := enroll.Settings{DNSCapture: true}
	p, err := PlanFor(ips, settings, true)
	must(t, err)
	for _, b := range []Backend{BackendNftables, BackendIptables, backendIptablesLegacy} {
		t.Run(string(b), func(t *testing.T) {
			r := newBareRedirector(t, b)
			taken := podNetns(t)
			istioCniRules(t, taken, p)
			w := podWorkload(taken, ips, settings)
			w.Running = true
			must(t, apply(r, w))
			r.takeover.wait()
			if tables := inNetns(t, taken, "nft", "list", "tables"); strings.Contains(tables, "istio-ambient") {
				t.Errorf("istio-cni's tables left in a pod taken over:\n%s", tables)
			}
			nftSave := inNetns(t, taken, "iptables-nft-save") + inNetns(t, taken, "ip6tables-nft-save")
			switch b {
			case BackendIptables:
				if n := strings.Count(nftSave, "-A PREROUTING -j ISTIO_PRERT"); n != 6 {
					t.Errorf("%d jumps to ISTIO_PRERT, want one per table and family (6):\n%s", n, nftSave)
				}
			default:
				if strings.Contains(nftSave, "ISTIO_") {
					t.Errorf("istio-cni's chains left in a pod taken over:\n%s", nftSave)
				}
			}
			if has, err := r.backend.present(netnstest.Fd(t, taken)); b == BackendNftables && (err != nil || !has) {
				t.Errorf("meshlet's rules not in the pod taken over: %v, %v", has, err)
			}
			if b == backendIptablesLegacy {
				if save := inNetns(t, taken, "iptables-legacy-save"); !strings.Contains(save, "-A PREROUTING -j ISTIO_PRERT") {
					t.Errorf("meshlet's rules not in the pod taken over:\n%s", save)
				}
			}

			started := podNetns(t)
			istioCniRules(t, started, p)
			before := fullDump(t, started)
			must(t, apply(r, podWorkload(started, ips, settings)))
			r.takeover.wait()
			if got := fullDump(t, started); b == BackendNftables && !strings.Contains(got, "istio-ambient-nat") {
				t.Errorf("a pod enrolled in a hook was looked at for istio-cni's rules:\n%s\nwas:\n%s", got, before)
			}

			must(t, r.Remove(context.Background(), podWorkload(started, ips, settings), enroll.RemoveAll))
			after := fullDump(t, started)
			if strings.Contains(after, "istio-ambient") || strings.Contains(after, "ISTIO_") || strings.Contains(after, TableName) {
				t.Errorf("rules left after Remove:\n%s", after)
			}
		})
	}
}

// TestSwitchingBackends: a running pod a previous meshlet programmed with
// one backend, adopted by a meshlet with the other (its checkpointed
// record names the first), ends with the new backend's rules only: the
// new ones go in, then the old ones out.
func TestSwitchingBackends(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	for _, tc := range []struct{ from, to Backend }{{BackendNftables, BackendIptables}, {BackendIptables, BackendNftables}} {
		t.Run(string(tc.from)+"-to-"+string(tc.to), func(t *testing.T) {
			h := podNetns(t)
			w := podWorkload(h, ips, enroll.Settings{DNSCapture: true})
			account, err := newBareRedirector(t, tc.from).Apply(context.Background(), w, nil)
			must(t, err)
			prior := w.Record
			prior.Redirection = account
			r := newBareRedirector(t, tc.to)
			w.Running = true
			_, err = r.Apply(context.Background(), w, &prior)
			must(t, err)
			r.takeover.wait()
			dump := fullDump(t, h)
			hasNft, hasIpt := strings.Contains(dump, "table inet "+TableName), strings.Contains(dump, "-A PREROUTING -j ISTIO_PRERT")
			if hasNft != (tc.to == BackendNftables) || hasIpt != (tc.to == BackendIptables) {
				t.Fatalf("after the switch to %s: nftables table %v, iptables chains %v:\n%s", tc.to, hasNft, hasIpt, dump)
			}
		})
	}
}

// TestHandBack: a pod meshlet leaves running on uninstall ends with
// exactly the rules istio-cni writes (those of the iptables backend, nft
// variant, for the same plan), and none of meshlet's other rules.
func TestHandBack(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	settings := enroll.Settings{DNSCapture: false}
	istio := podNetns(t)
	must(t, apply(newBareRedirector(t, BackendIptables), podWorkload(istio, ips, settings)))
	save := func(h *netns.Handle) string {
		return counters.ReplaceAllString(inNetns(t, h, "iptables-nft-save")+inNetns(t, h, "ip6tables-nft-save"), "[0:0]")
	}
	want := stripComments(save(istio))
	for _, b := range []Backend{BackendNftables, backendIptablesLegacy, BackendIptables} {
		t.Run(string(b), func(t *testing.T) {
			h := podNetns(t)
			r := newBareRedirector(t, b)
			w := podWorkload(h, ips, settings)
			account, err := r.Apply(context.Background(), w, nil)
			must(t, err)
			w.Redirection = account
			must(t, r.HandBack(context.Background(), w))
			if got := stripComments(save(h)); got != want {
				t.Errorf("rules after HandBack:\n%s\nwant istio-cni's:\n%s", got, want)
			}
			dump := fullDump(t, h)
			if strings.Contains(dump, "table inet "+TableName) || strings.Contains(inNetns(t, h, "iptables-legacy-save"), "ISTIO_") {
				t.Errorf("meshlet's other rules left after HandBack:\n%s", dump)
			}
		})
	}
}

// stripComments drops iptables-save's comment lines (they carry the time).
func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
