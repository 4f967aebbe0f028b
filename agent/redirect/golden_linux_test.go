package redirect

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// podNetns is a bare pod netns with lo up (as the CNI loopback plugin
// leaves it).
func podNetns(t testing.TB) *netns.Handle {
	h := netnstest.Open(t)
	nh := handleIn(t, h)
	lo, err := nh.LinkByName("lo")
	must(t, err)
	must(t, nh.LinkSetUp(lo))
	return h
}

func newBareRedirector(t testing.TB, b Backend, opts ...func(*Config)) *Redirector {
	t.Helper()
	topo := &topology{host: netnstest.Open(t)}
	return topo.newRedirector(t, b, opts...)
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// rulesDump is the backend's view of the netns, normalised.
func rulesDump(t testing.TB, h *netns.Handle, b Backend) string {
	if b == BackendNftables {
		return nftTable(t, h)
	}
	variant := "nft"
	if b == backendIptablesLegacy {
		variant = "legacy"
	}
	var out strings.Builder
	for _, tool := range []string{"iptables-" + variant + "-save", "ip6tables-" + variant + "-save"} {
		// The same header for both variants: their output must be identical.
		out.WriteString("# " + strings.Replace(tool, "-"+variant, "", 1) + "\n")
		out.WriteString(normalizeSave(inNetns(t, h, tool)))
	}
	return out.String()
}

// normalizeSave drops comments and counters and orders the tables by name
// (the legacy and nft variants list them in different orders).
func normalizeSave(save string) string {
	var tables []string
	var cur strings.Builder
	for _, line := range strings.Split(save, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cur.WriteString(counters.ReplaceAllString(line, "[0:0]") + "\n")
		if line == "COMMIT" {
			tables = append(tables, cur.String())
			cur.Reset()
		}
	}
	slices.Sort(tables)
	return strings.Join(tables, "")
}

func nftTable(t testing.TB, h *netns.Handle) string {
	var out string
	err := netnstest.Run(h, func() error {
		b, err := execOutput("nft", "list", "table", "inet", TableName)
		out = b
		return err
	})
	if err != nil {
		return "no table inet " + TableName + "\n"
	}
	return out
}

// routingDump lists ip rules and the proxy routing table.
func routingDump(t testing.TB, h *netns.Handle) string {
	return "# ip -4 rule\n" + inNetns(t, h, "ip", "-4", "rule") +
		"# ip -6 rule\n" + inNetns(t, h, "ip", "-6", "rule") +
		"# ip -4 route show table all\n" + inNetns(t, h, "ip", "-4", "route", "show", "table", "all") +
		"# ip -6 route show table all\n" + inNetns(t, h, "ip", "-6", "route", "show", "table", "all")
}

// fullDump is everything Apply may change in a pod netns, normalised:
// iptables-nft creates its tables and built-in chains on first use and
// leaves them (empty) behind, as iptables always has; they are compared
// through iptables-save's rules and user chains, every other nftables
// table in full.
func fullDump(t testing.TB, h *netns.Handle) string {
	var b strings.Builder
	for _, line := range strings.Split(inNetns(t, h, "nft", "list", "tables"), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || (f[1] == "ip" || f[1] == "ip6") && iptablesTables[f[2]] {
			continue
		}
		b.WriteString(inNetns(t, h, "nft", "list", "table", f[1], f[2]))
	}
	for _, tool := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		b.WriteString("# " + tool + "\n")
		for _, line := range strings.Split(inNetns(t, h, tool), "\n") {
			if strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, ":") && strings.Contains(line, " - [") {
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String() + routingDump(t, h)
}

var iptablesTables = map[string]bool{"filter": true, "nat": true, "mangle": true, "raw": true, "security": true}

func TestGolden(t *testing.T) {
	// Every subtest needs root: without it the test itself skips, rather
	// than passing with nothing run.
	privtest.RequireRoot(t)
	for _, b := range backends {
		for _, c := range ruleCases {
			t.Run(string(b)+"/"+c.name, func(t *testing.T) {
				r := newBareRedirector(t, b, c.ipv6Setting)
				pod := podNetns(t)
				w := podWorkload(pod, c.ips, c.settings)
				must(t, apply(r, w))
				got := rulesDump(t, pod, b) + routingDump(t, pod)
				// Both iptables variants must produce the same rules.
				checkGolden(t, strings.TrimSuffix(string(b), "-legacy")+"_"+c.name, got)
				// Apply again: the same state, nothing duplicated.
				must(t, apply(r, w))
				if again := rulesDump(t, pod, b) + routingDump(t, pod); again != got {
					t.Fatalf("second Apply changed the netns:\n%s\n--- first\n%s", again, got)
				}
			})
		}
	}
}

// foreignState puts rules that belong to others (the CNI, an admin) in the
// netns: Apply and Remove must leave them exactly as they are.
func foreignState(t testing.TB, h *netns.Handle) {
	inNetns(t, h, "nft", "add table ip cni-foreign; add chain ip cni-foreign post { type nat hook postrouting priority 100; }; add rule ip cni-foreign post ip saddr 10.99.0.0/16 masquerade")
	inNetns(t, h, "iptables-nft", "-t", "filter", "-A", "OUTPUT", "-p", "tcp", "--dport", "9", "-j", "DROP")
	inNetns(t, h, "ip", "rule", "add", "fwmark", "0x42", "lookup", "42", "pref", "1000")
}

func TestRemoveRestoresNetns(t *testing.T) {
	privtest.RequireRoot(t)
	for _, b := range backends {
		for _, c := range ruleCases {
			t.Run(string(b)+"/"+c.name, func(t *testing.T) {
				r := newBareRedirector(t, b, c.ipv6Setting)
				pod := podNetns(t)
				foreignState(t, pod)
				before := fullDump(t, pod)
				w := podWorkload(pod, c.ips, c.settings)
				must(t, apply(r, w))
				if fullDump(t, pod) == before {
					t.Fatal("Apply changed nothing")
				}
				must(t, r.Remove(context.Background(), w, enroll.RemoveAll))
				if after := fullDump(t, pod); after != before {
					t.Fatalf("netns after Remove differs from before Apply\n--- after\n%s\n--- before\n%s", after, before)
				}
				// Removing again is harmless.
				must(t, r.Remove(context.Background(), w, enroll.RemoveAll))
			})
		}
	}
}

func TestApplyReplacesStaleState(t *testing.T) {
	privtest.RequireRoot(t)
	w := func(pod *netns.Handle) *enroll.Workload {
		return podWorkload(pod, []netip.Addr{podV4, podV6}, enroll.Settings{DNSCapture: true})
	}
	t.Run("nftables", func(t *testing.T) {
		r := newBareRedirector(t, BackendNftables)
		pod := podNetns(t)
		// A crashed older agent left a partial table behind.
		inNetns(t, pod, "nft", "add table inet meshlet; add chain inet meshlet stale { type filter hook input priority 0; }; add rule inet meshlet stale tcp dport 1 drop")
		must(t, apply(r, w(pod)))
		checkGolden(t, "nftables_dual", rulesDump(t, pod, BackendNftables)+routingDump(t, pod))
	})
	t.Run("iptables", func(t *testing.T) {
		r := newBareRedirector(t, BackendIptables)
		pod := podNetns(t)
		inNetns(t, pod, "iptables-nft", "-t", "nat", "-N", "ISTIO_OUTPUT")
		inNetns(t, pod, "iptables-nft", "-t", "nat", "-A", "ISTIO_OUTPUT", "-p", "tcp", "-j", "REDIRECT", "--to-ports", "1")
		inNetns(t, pod, "iptables-nft", "-t", "nat", "-A", "OUTPUT", "-j", "ISTIO_OUTPUT")
		must(t, apply(r, w(pod)))
		checkGolden(t, "iptables_dual", rulesDump(t, pod, BackendIptables)+routingDump(t, pod))
	})
}

// TestFailedBatchLeavesNothing injects a failure into the middle of the
// transaction: the pod must end with none of meshlet's state.
func TestFailedBatchLeavesNothing(t *testing.T) {
	privtest.RequireRoot(t)
	t.Run("nftables", func(t *testing.T) {
		r := newBareRedirector(t, BackendNftables)
		pod := podNetns(t)
		before := fullDump(t, pod)
		nftBatchHook = func(b *nftBatch) {
			// A rule for a chain that does not exist: the kernel rejects the
			// message, and with it the whole batch.
			b.addRule(TableName, "missing", 1, rule().tcp().accept())
		}
		defer func() { nftBatchHook = nil }()
		w := podWorkload(pod, []netip.Addr{podV4}, enroll.Settings{DNSCapture: true})
		if err := apply(r, w); err == nil {
			t.Fatal("Apply succeeded with a broken batch")
		}
		if after := fullDump(t, pod); after != before {
			t.Fatalf("failed Apply left state behind\n--- after\n%s\n--- before\n%s", after, before)
		}
	})
	t.Run("iptables", func(t *testing.T) {
		r := newBareRedirector(t, BackendIptables)
		pod := podNetns(t)
		before := fullDump(t, pod)
		iptablesRestoreHook = func(in string) string {
			// Break the nat table after the mangle table went in.
			return strings.Replace(in, "*nat\n", "*nat\n-A ISTIO_OUTPUT -j NO_SUCH_TARGET\n", 1)
		}
		defer func() { iptablesRestoreHook = nil }()
		w := podWorkload(pod, []netip.Addr{podV4}, enroll.Settings{DNSCapture: true})
		if err := apply(r, w); err == nil {
			t.Fatal("Apply succeeded with a broken restore file")
		}
		if after := fullDump(t, pod); after != before {
			t.Fatalf("failed Apply left state behind\n--- after\n%s\n--- before\n%s", after, before)
		}
	})
}

func TestBadInput(t *testing.T) {
	privtest.RequireRoot(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			r := newBareRedirector(t, b, withoutIPv6)
			pod := podNetns(t)
			before := fullDump(t, pod)
			if err := apply(r, podWorkload(pod, nil, enroll.Settings{})); !errors.Is(err, ErrNoAddresses) {
				t.Fatalf("Apply without IPs = %v, want ErrNoAddresses", err)
			}
			err := apply(r, podWorkload(pod, []netip.Addr{podV6}, enroll.Settings{}))
			if err == nil || !strings.Contains(err.Error(), "--ipv6") {
				t.Fatalf("Apply of an IPv6-only pod with IPv6 off = %v, want an error naming --ipv6", err)
			}
			closed := podNetns(t)
			must(t, closed.Close())
			if err := apply(r, podWorkload(closed, []netip.Addr{podV4}, enroll.Settings{})); err == nil {
				t.Fatal("Apply on a closed netns succeeded")
			}
			if after := fullDump(t, pod); after != before {
				t.Fatalf("rejected input changed the netns:\n%s", after)
			}
		})
	}
}

func TestHostSNATIsIncremental(t *testing.T) {
	host := netnstest.Open(t)
	h, err := newNftHostSNAT(netnstest.Fd(t, host), TableName)
	must(t, err)
	a, b := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	v6 := netip.MustParseAddr("2001:db8::10")
	must(t, h.Add([]netip.Addr{a, v6}))
	must(t, h.Add([]netip.Addr{b}))
	must(t, h.Delete([]netip.Addr{a, v6}))
	must(t, h.Delete([]netip.Addr{a, v6})) // already gone: no error
	list := nftTable(t, host)
	if !strings.Contains(list, "elements = { 192.0.2.11 }") || strings.Contains(list, "192.0.2.10") || strings.Contains(list, "2001:db8::10") {
		t.Fatalf("node table after add a,b / delete a:\n%s", list)
	}
	// Retain drops what is not kept (pods removed while no agent ran).
	c := netip.MustParseAddr("192.0.2.12")
	must(t, h.Add([]netip.Addr{c, v6}))
	must(t, h.Retain([]netip.Addr{b}))
	if list := nftTable(t, host); !strings.Contains(list, "elements = { 192.0.2.11 }") || strings.Contains(list, "192.0.2.12") || strings.Contains(list, "2001:db8::10") {
		t.Fatalf("node table after Retain(b):\n%s", list)
	}
	// A restarted agent keeps the elements (probes of running pods keep working).
	h2, err := newNftHostSNAT(netnstest.Fd(t, host), TableName)
	must(t, err)
	if !strings.Contains(nftTable(t, host), "elements = { 192.0.2.11 }") {
		t.Fatalf("restart lost set elements:\n%s", nftTable(t, host))
	}
	must(t, h2.Uninstall())
	if got := nftTable(t, host); !strings.HasPrefix(got, "no table") {
		t.Fatalf("Uninstall left:\n%s", got)
	}
}

func TestIptablesHostSNAT(t *testing.T) {
	host := netnstest.Open(t)
	ipt, err := newIptables(VariantNft, netnstest.Fd(t, host))
	must(t, err)
	names := Config{}.nodeNames()
	ipsetV4, ipsetV6 := names.ipset4, names.ipset6
	h, err := newIptablesHostSNAT(ipt, netnstest.Fd(t, host), names)
	must(t, err)
	// Set-up is idempotent: a restarted agent adds no second jump.
	_, err = newIptablesHostSNAT(ipt, netnstest.Fd(t, host), names)
	must(t, err)
	a, b := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	must(t, h.Add([]netip.Addr{a, b}))
	must(t, h.Delete([]netip.Addr{a}))
	must(t, h.Delete([]netip.Addr{a})) // already gone: no error
	save := inNetns(t, host, "iptables-nft-save", "-t", "nat")
	if strings.Count(save, "-A POSTROUTING -j MESHLET_POSTRT") != 1 ||
		!strings.Contains(save, "-A MESHLET_POSTRT -p tcp -m owner --socket-exists -m set --match-set meshlet-probes-v4 dst -j SNAT --to-source 169.254.7.127") {
		t.Fatalf("node nat table:\n%s", save)
	}
	if v4 := inNetns(t, host, "ipset", "list", ipsetV4); strings.Contains(v4, "192.0.2.10") {
		t.Fatalf("deleted address still in %s:\n%s", ipsetV4, v4)
	}
	if v6 := inNetns(t, host, "ipset", "list", ipsetV6); !strings.Contains(v6, "2001:db8::10") {
		t.Fatalf("address missing from %s:\n%s", ipsetV6, v6)
	}
	kept := netip.MustParseAddr("192.0.2.11")
	must(t, h.Add([]netip.Addr{kept, netip.MustParseAddr("192.0.2.12")}))
	must(t, h.Retain([]netip.Addr{kept}))
	if v4, v6 := inNetns(t, host, "ipset", "list", ipsetV4), inNetns(t, host, "ipset", "list", ipsetV6); !strings.Contains(v4, "192.0.2.11") ||
		strings.Contains(v4, "192.0.2.12") || strings.Contains(v6, "2001:db8::10") {
		t.Fatalf("after Retain(192.0.2.11):\n%s\n%s", v4, v6)
	}
	must(t, h.Uninstall())
	for _, tool := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
		if out := inNetns(t, host, tool); strings.Contains(out, "MESHLET") {
			t.Fatalf("%s after Uninstall:\n%s", tool, out)
		}
	}
	if out := inNetns(t, host, "ipset", "list", "-n"); strings.Contains(out, "meshlet") {
		t.Fatalf("ipsets after Uninstall: %s", out)
	}
}

// tableHandle is the kernel's handle of meshlet's table: it changes when the
// table is replaced.
func tableHandle(t testing.TB, h *netns.Handle) string {
	out := inNetns(t, h, "nft", "-a", "list", "table", "inet", TableName)
	first := strings.SplitN(out, "\n", 2)[0]
	i := strings.Index(first, "# handle ")
	if i < 0 {
		t.Fatalf("no handle in %q", first)
	}
	return first[i:]
}

// TestAdoption: a pod a previous agent enrolled keeps its rules when its
// checkpointed record says they are what this redirector would install and
// the table is there; a different account, or a missing table, means a
// normal apply. The account names the backend and the plan.
func TestAdoption(t *testing.T) {
	privtest.RequireRoot(t)
	settings := enroll.Settings{DNSCapture: true}
	w := func(pod *netns.Handle, s enroll.Settings) *enroll.Workload {
		return podWorkload(pod, []netip.Addr{podV4}, s)
	}
	// enrollOnce is the previous agent: its Apply's account is what the
	// checkpoint keeps.
	enrollOnce := func(t *testing.T, pod *netns.Handle) *enroll.Record {
		first := w(pod, settings)
		account, err := newBareRedirector(t, BackendNftables).Apply(context.Background(), first, nil)
		must(t, err)
		if account != "nftables/v1 ipv4 dns-capture inbound-capture" {
			t.Fatalf("account %q", account)
		}
		rec := first.Record
		rec.Redirection = account
		return &rec
	}
	t.Run("unchanged pod keeps its table", func(t *testing.T) {
		pod := podNetns(t)
		prior := enrollOnce(t, pod)
		before := tableHandle(t, pod)
		r := newBareRedirector(t, BackendNftables) // the restarted agent
		account, err := r.Apply(context.Background(), w(pod, settings), prior)
		must(t, err)
		if after := tableHandle(t, pod); after != before || account != prior.Redirection {
			t.Fatalf("table rewritten on adoption (%s → %s) or account changed (%q)", before, after, account)
		}
		checkGolden(t, "nftables_ipv4", rulesDump(t, pod, BackendNftables)+routingDump(t, pod))
	})
	t.Run("a different account is applied", func(t *testing.T) {
		pod := podNetns(t)
		prior := enrollOnce(t, pod)
		before := tableHandle(t, pod)
		prior.Redirection = "nftables/v0 ipv4 dns-capture inbound-capture" // an older meshlet's rules
		must(t, func() error {
			_, err := newBareRedirector(t, BackendNftables).Apply(context.Background(), w(pod, settings), prior)
			return err
		}())
		if tableHandle(t, pod) == before {
			t.Fatal("rules kept although the previous agent's account differs")
		}
		checkGolden(t, "nftables_ipv4", rulesDump(t, pod, BackendNftables)+routingDump(t, pod))
	})
	t.Run("missing table is applied", func(t *testing.T) {
		pod := podNetns(t)
		prior := enrollOnce(t, pod)
		inNetns(t, pod, "nft", "delete", "table", "inet", TableName)
		_, err := newBareRedirector(t, BackendNftables).Apply(context.Background(), w(pod, settings), prior)
		must(t, err)
		if strings.HasPrefix(nftTable(t, pod), "no table") {
			t.Fatal("adoption of a pod without a table left it without rules")
		}
	})
}

// Two meshlets on one node (an instance each, one per revision) keep
// their probe SNAT apart: one's clean-up (Retain) and uninstall leave the
// other's addresses and rules in place.
func TestHostSNATInstancesAreSeparate(t *testing.T) {
	pod := netip.MustParseAddr("192.0.2.20")
	canaryPod := netip.MustParseAddr("192.0.2.21")
	t.Run("nftables", func(t *testing.T) {
		host := netnstest.Open(t)
		stable, err := newNftHostSNAT(netnstest.Fd(t, host), Config{}.nodeNames().table)
		must(t, err)
		canary, err := newNftHostSNAT(netnstest.Fd(t, host), Config{Instance: "canary"}.nodeNames().table)
		must(t, err)
		must(t, stable.Add([]netip.Addr{pod}))
		must(t, canary.Add([]netip.Addr{canaryPod}))
		must(t, canary.Retain(nil))
		must(t, canary.Uninstall())
		if got := inNetns(t, host, "nft", "list", "table", "inet", "meshlet"); !strings.Contains(got, "elements = { 192.0.2.20 }") {
			t.Fatalf("table inet meshlet after the canary instance's Retain and Uninstall:\n%s", got)
		}
		if err := netnstest.Run(host, exec.Command("nft", "list", "table", "inet", "meshlet-canary").Run); err == nil {
			t.Fatal("table inet meshlet-canary outlived its Uninstall")
		}
		must(t, stable.Uninstall())
	})
	t.Run("iptables", func(t *testing.T) {
		host := netnstest.Open(t)
		ipt, err := newIptables(VariantNft, netnstest.Fd(t, host))
		must(t, err)
		stableNames, canaryNames := Config{}.nodeNames(), Config{Instance: "canary"}.nodeNames()
		stable, err := newIptablesHostSNAT(ipt, netnstest.Fd(t, host), stableNames)
		must(t, err)
		canary, err := newIptablesHostSNAT(ipt, netnstest.Fd(t, host), canaryNames)
		must(t, err)
		must(t, stable.Add([]netip.Addr{pod}))
		must(t, canary.Add([]netip.Addr{canaryPod}))
		save := inNetns(t, host, "iptables-nft-save", "-t", "nat")
		if !strings.Contains(save, "-A MESHLET_canary -p tcp -m owner --socket-exists -m set --match-set meshlet-v4-canary dst -j SNAT --to-source 169.254.7.127") {
			t.Fatalf("node nat table with both instances:\n%s", save)
		}
		must(t, canary.Retain(nil))
		must(t, canary.Uninstall())
		if v4 := inNetns(t, host, "ipset", "list", stableNames.ipset4); !strings.Contains(v4, "192.0.2.20") {
			t.Fatalf("%s after the canary instance's Retain and Uninstall:\n%s", stableNames.ipset4, v4)
		}
		save = inNetns(t, host, "iptables-nft-save", "-t", "nat")
		if strings.Count(save, "-A POSTROUTING -j MESHLET_POSTRT") != 1 || strings.Contains(save, "MESHLET_canary") {
			t.Fatalf("node nat table after the canary instance's Uninstall:\n%s", save)
		}
		if out := inNetns(t, host, "ipset", "list", "-n"); strings.Contains(out, "canary") {
			t.Fatalf("ipsets after the canary instance's Uninstall: %s", out)
		}
		must(t, stable.Uninstall())
	})
}
