package redirect

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The nftables rules are netlink expressions, not text: these tests print
// what podRules builds as deterministic text, decoding each expression the
// way the kernel evaluates it, so the rule set is checked (and recorded
// under testdata/nftables_rules_*.golden) without root or a kernel. The
// printer rejects what the kernel would evaluate wrongly: an address or
// port read without the family or protocol match that makes it one, data
// of the wrong size for what it is compared with, a rule without a verdict
// or statement, an expression it does not know.

// printRules renders the table nftBatch would write for p: the chains in
// their creation order, each with its rules.
func printRules(p Plan) (string, error) {
	rules := podRules(p)
	var b strings.Builder
	seen := 0
	for _, spec := range chainOrder {
		rs := rules[spec]
		if len(rs) == 0 {
			continue // nftBatch creates no empty chain
		}
		seen++
		fmt.Fprintf(&b, "chain %s { type %s hook %s priority %d }\n", spec.name, spec.typ, hookName(spec.hook), *spec.priority)
		for i, r := range rs {
			line, err := printRule(r)
			if err != nil {
				return "", fmt.Errorf("chain %s rule %d: %w", spec.name, i, err)
			}
			b.WriteString("\t" + line + "\n")
		}
	}
	if seen != len(rules) {
		return "", fmt.Errorf("podRules has rules for %d chains, %d of them in chainOrder: nftBatch would drop the others", len(rules), seen)
	}
	return b.String(), nil
}

func hookName(h *nftables.ChainHook) string {
	switch *h {
	case *nftables.ChainHookPrerouting:
		return "prerouting"
	case *nftables.ChainHookOutput:
		return "output"
	}
	return fmt.Sprintf("hook-%d", *h)
}

// reg1 is what register 1 holds while a rule is read.
type reg1 struct {
	text string // as nft would name it: "meta mark", "ip daddr", …
	kind string // what the bytes mean: "nfproto", "l4proto", "ifname", "addr4", "addr6", "port", "mark", "imm"
	size int    // bytes a comparison must have
	data []byte // an immediate's value
}

func printRule(exprs []expr.Any) (string, error) {
	var out []string
	var r reg1
	family, l4 := "", "" // the rule's family and protocol matches so far
	loaded := func(reg uint32, text, kind string, size int) error {
		if reg != 1 {
			return fmt.Errorf("%s loaded into register %d, want 1", text, reg)
		}
		r = reg1{text: text, kind: kind, size: size}
		return nil
	}
	for i, e := range exprs {
		last := i == len(exprs)-1
		var err error
		switch e := e.(type) {
		case *expr.Meta:
			if e.SourceRegister {
				if e.Key != expr.MetaKeyMARK || r.kind != "mark" {
					return "", fmt.Errorf("meta %d set from %q", e.Key, r.text)
				}
				out = append(out, "meta mark set "+r.text)
				break
			}
			switch e.Key {
			case expr.MetaKeyNFPROTO:
				err = loaded(e.Register, "meta nfproto", "nfproto", 1)
			case expr.MetaKeyL4PROTO:
				err = loaded(e.Register, "meta l4proto", "l4proto", 1)
			case expr.MetaKeyOIFNAME:
				err = loaded(e.Register, "meta oifname", "ifname", unix.IFNAMSIZ)
			case expr.MetaKeyMARK:
				err = loaded(e.Register, "meta mark", "mark", 4)
			default:
				err = fmt.Errorf("unknown meta key %d", e.Key)
			}
		case *expr.Payload:
			if e.OperationType != expr.PayloadLoad {
				return "", fmt.Errorf("payload write")
			}
			switch {
			case e.Base == expr.PayloadBaseNetworkHeader && e.Len == 4 && (e.Offset == 12 || e.Offset == 16):
				if family != "ipv4" {
					return "", fmt.Errorf("IPv4 address read without meta nfproto ipv4 (in an inet table it reads IPv6 packets too)")
				}
				err = loaded(e.DestRegister, "ip "+map[uint32]string{12: "saddr", 16: "daddr"}[e.Offset], "addr4", 4)
			case e.Base == expr.PayloadBaseNetworkHeader && e.Len == 16 && (e.Offset == 8 || e.Offset == 24):
				if family != "ipv6" {
					return "", fmt.Errorf("IPv6 address read without meta nfproto ipv6 (in an inet table it reads IPv4 packets too)")
				}
				err = loaded(e.DestRegister, "ip6 "+map[uint32]string{8: "saddr", 24: "daddr"}[e.Offset], "addr6", 16)
			case e.Base == expr.PayloadBaseTransportHeader && e.Len == 2 && (e.Offset == 0 || e.Offset == 2):
				if l4 == "" {
					return "", fmt.Errorf("port read without meta l4proto (it would read any protocol's header)")
				}
				err = loaded(e.DestRegister, l4+" "+map[uint32]string{0: "sport", 2: "dport"}[e.Offset], "port", 2)
			default:
				err = fmt.Errorf("unknown payload base %d offset %d len %d", e.Base, e.Offset, e.Len)
			}
		case *expr.Ct:
			switch {
			case e.SourceRegister && e.Key == expr.CtKeyMARK && r.kind == "mark":
				out = append(out, "ct mark set "+r.text)
			case e.SourceRegister && e.Key == expr.CtKeyZONE && r.kind == "imm" && len(r.data) == 2:
				out = append(out, fmt.Sprintf("ct zone set %d", binaryutil.NativeEndian.Uint16(r.data)))
			case !e.SourceRegister && e.Key == expr.CtKeyMARK:
				err = loaded(e.Register, "ct mark", "mark", 4)
			default:
				err = fmt.Errorf("ct key %d (set: %t) with register holding %q", e.Key, e.SourceRegister, r.text)
			}
		case *expr.Bitwise:
			if e.SourceRegister != 1 || e.DestRegister != 1 || r.kind != "mark" || e.Len != 4 || len(e.Mask) != 4 || len(e.Xor) != 4 {
				return "", fmt.Errorf("bitwise on %q: %+v", r.text, e)
			}
			r.text = fmt.Sprintf("%s & %#08x", r.text, binaryutil.NativeEndian.Uint32(e.Mask))
			if x := binaryutil.NativeEndian.Uint32(e.Xor); x != 0 {
				r.text += fmt.Sprintf(" ^ %#08x", x)
			}
		case *expr.Cmp:
			s, err := printCmp(e, r)
			if err != nil {
				return "", err
			}
			out = append(out, s)
			if e.Op == expr.CmpOpEq {
				switch r.kind {
				case "nfproto":
					family = nfprotos[e.Data[0]]
				case "l4proto":
					l4 = l4protos[e.Data[0]]
				}
			}
		case *expr.Immediate:
			if e.Register != 1 {
				return "", fmt.Errorf("immediate into register %d", e.Register)
			}
			r = reg1{text: "immediate", kind: "imm", data: e.Data}
		case *expr.Redir:
			if e.RegisterProtoMin != 1 || e.Flags&unix.NF_NAT_RANGE_PROTO_SPECIFIED == 0 || r.kind != "imm" || len(r.data) != 2 {
				return "", fmt.Errorf("redirect without a port: %+v, register %q", e, r.text)
			}
			if l4 == "" {
				// The kernel rejects a port redirect not restricted to TCP or UDP.
				return "", fmt.Errorf("redirect to a port without meta l4proto")
			}
			out = append(out, fmt.Sprintf("redirect to :%d", binaryutil.BigEndian.Uint16(r.data)))
		case *expr.Verdict:
			out = append(out, map[expr.VerdictKind]string{expr.VerdictAccept: "accept", expr.VerdictDrop: "drop"}[e.Kind])
		default:
			err = fmt.Errorf("expression %T not known to the printer", e)
		}
		if err != nil {
			return "", err
		}
		switch e.(type) {
		case *expr.Redir, *expr.Verdict:
			if !last {
				return "", fmt.Errorf("expressions after the verdict: %s", strings.Join(out, " "))
			}
		}
		if last && !isStatement(e) {
			return "", fmt.Errorf("rule ends without a verdict or statement: %s", strings.Join(out, " "))
		}
	}
	return strings.Join(out, " "), nil
}

func isStatement(e expr.Any) bool {
	switch e := e.(type) {
	case *expr.Redir, *expr.Verdict:
		return true
	case *expr.Meta:
		return e.SourceRegister
	case *expr.Ct:
		return e.SourceRegister
	}
	return false
}

var (
	nfprotos = map[byte]string{unix.NFPROTO_IPV4: "ipv4", unix.NFPROTO_IPV6: "ipv6"}
	l4protos = map[byte]string{unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp"}
)

func printCmp(e *expr.Cmp, r reg1) (string, error) {
	op := map[expr.CmpOp]string{expr.CmpOpEq: "==", expr.CmpOpNeq: "!="}[e.Op]
	if op == "" || e.Register != 1 {
		return "", fmt.Errorf("cmp op %d register %d", e.Op, e.Register)
	}
	if r.kind == "" || r.kind == "imm" {
		return "", fmt.Errorf("cmp with nothing loaded")
	}
	if len(e.Data) != r.size {
		return "", fmt.Errorf("%s compared with %d bytes, want %d", r.text, len(e.Data), r.size)
	}
	var v string
	switch r.kind {
	case "nfproto":
		v = nfprotos[e.Data[0]]
	case "l4proto":
		v = l4protos[e.Data[0]]
	case "ifname":
		v = fmt.Sprintf("%q", strings.TrimRight(string(e.Data), "\x00"))
	case "addr4", "addr6":
		a, _ := netip.AddrFromSlice(e.Data)
		v = a.String()
	case "port":
		v = fmt.Sprint(binaryutil.BigEndian.Uint16(e.Data))
	case "mark":
		v = fmt.Sprintf("%#08x", binaryutil.NativeEndian.Uint32(e.Data))
	}
	if v == "" {
		return "", fmt.Errorf("%s compared with unknown value %x", r.text, e.Data)
	}
	return r.text + " " + op + " " + v, nil
}

// TestPodRulesGolden records the rule set of each rule case (the kernel's
// listing of the same cases is in nftables_<case>.golden, written by the
// root-only TestGolden).
func TestPodRulesGolden(t *testing.T) {
	for _, c := range ruleCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := printRules(c.plan(t))
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "nftables_rules_"+c.name, got)
		})
	}
}

// TestPodRules checks what each plan option does to the rule set, over
// every combination, independently of the golden files.
func TestPodRules(t *testing.T) {
	for _, fams := range [][]Family{{IPv4}, {IPv6}, {IPv4, IPv6}} {
		for _, dns := range []bool{false, true} {
			for _, inbound := range []bool{false, true} {
				p := Plan{Families: fams, DNSCapture: dns, InboundCapture: inbound}
				t.Run(fmt.Sprintf("%v/dns=%t/inbound=%t", fams, dns, inbound), func(t *testing.T) {
					text, err := printRules(p)
					if err != nil {
						t.Fatal(err)
					}
					chains := map[string][]string{}
					var cur string
					for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
						if f := strings.Fields(line); f[0] == "chain" {
							cur = f[1]
							continue
						}
						chains[cur] = append(chains[cur], strings.TrimSpace(line))
					}
					checkPodRules(t, p, chains, text)
				})
			}
		}
	}
}

func checkPodRules(t *testing.T, p Plan, chains map[string][]string, text string) {
	t.Helper()
	has := func(s string) bool { return strings.Contains(text, s) }
	// Outbound TCP always goes to ztunnel, and replies of connections it
	// accepted are always routed back to it.
	if n := count(chains["output-nat"], "redirect to :15001"); n != len(p.Families) {
		t.Errorf("%d outbound redirects, want one per family (%d)", n, len(p.Families))
	}
	if len(chains["output-mangle"]) != 1 || !strings.HasSuffix(chains["output-mangle"][0], "meta mark set ct mark") {
		t.Errorf("output-mangle %q, want the one mark-restoring rule", chains["output-mangle"])
	}
	// DNS capture: UDP and TCP port 53 to ztunnel's DNS proxy, its flows in
	// their own conntrack zone; none of it without.
	if got := has(":15053"); got != p.DNSCapture {
		t.Errorf("DNS redirect present: %t, DNS capture %t", got, p.DNSCapture)
	}
	if p.DNSCapture {
		if count(chains["output-nat"], "udp dport == 53") != 1 || count(chains["output-nat"], "tcp dport == 53") != len(p.Families) {
			t.Errorf("DNS capture without both UDP and TCP port 53:\n%s", text)
		}
		if len(chains["prerouting-raw"]) != 1 || len(chains["output-raw"]) != 1 || !has("ct zone set 1") {
			t.Errorf("DNS capture without the conntrack zone rules:\n%s", text)
		}
	} else if len(chains["prerouting-raw"])+len(chains["output-raw"]) != 0 {
		t.Errorf("raw chains without DNS capture:\n%s", text)
	}
	// Inbound capture: to ztunnel's inbound port, except HBONE and the
	// node's probes; connections ztunnel accepts get the connection mark.
	// Bypassed: the pod's prerouting is untouched.
	if got := len(chains["prerouting-nat"]) + len(chains["prerouting-mangle"]); (got > 0) != p.InboundCapture {
		t.Errorf("%d prerouting rules with inbound capture %t", got, p.InboundCapture)
	}
	if p.InboundCapture {
		if n := count(chains["prerouting-nat"], "tcp dport != 15008"); n != len(p.Families) {
			t.Errorf("%d inbound redirects exempting HBONE, want one per family", n)
		}
		if n := count(chains["prerouting-nat"], "redirect to :15006"); n != len(p.Families) {
			t.Errorf("%d inbound redirects, want one per family", n)
		}
		if len(chains["prerouting-mangle"]) != 1 || !has("ct mark set ct mark & 0xfffff000 ^ 0x00000111") {
			t.Errorf("prerouting-mangle %q, want the one connection-marking rule", chains["prerouting-mangle"])
		}
	}
	// Families: every rule of a single-stack pod is for its family only; a
	// dual-stack pod's family-neutral rules are written once.
	probes := map[Family]string{IPv4: ProbeAddrV4.String(), IPv6: ProbeAddrV6.String()}
	for _, f := range []Family{IPv4, IPv6} {
		in := false
		for _, pf := range p.Families {
			in = in || pf == f
		}
		if has(probes[f]) != in {
			t.Errorf("%s probe address present: %t, plan families %v", f, has(probes[f]), p.Families)
		}
	}
	seen := map[string]bool{}
	for chain, rules := range chains {
		for _, r := range rules {
			if seen[chain+r] {
				t.Errorf("%s: rule twice: %s", chain, r)
			}
			seen[chain+r] = true
			if len(p.Families) == 1 {
				want := "meta nfproto == " + strings.ToLower(strings.Replace(p.Families[0].String(), "IPv", "ipv", 1))
				if !strings.HasPrefix(r, want) {
					t.Errorf("%s: single-stack rule not guarded by %q: %s", chain, want, r)
				}
			}
		}
	}
}

func count(rules []string, s string) int {
	n := 0
	for _, r := range rules {
		if strings.Contains(r, s) {
			n++
		}
	}
	return n
}

// TestPrintRuleRejects: the printer's checks catch what they are there
// for, so a rule set they pass has none of it.
func TestPrintRuleRejects(t *testing.T) {
	for name, r := range map[string][]expr.Any{
		"address without family":        rule().daddrNot(podV4).tcp().redirect(PortOutbound),
		"address of the other family":   rule().family(IPv4).daddrNot(podV6).tcp().redirect(PortOutbound),
		"port without protocol":         rule().family(IPv4).dport(53).accept(),
		"redirect without protocol":     rule().family(IPv4).redirect(PortOutbound),
		"no verdict or statement":       rule().family(IPv4).tcp(),
		"expressions after the verdict": append(rule().tcp().accept(), &expr.Counter{}),
		"comparison of the wrong size":  append(rule().family(IPv4), &expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}}, &expr.Verdict{Kind: expr.VerdictAccept}),
		"unknown expression":            append(rule().tcp(), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept}),
	} {
		if s, err := printRule(r); err == nil {
			t.Errorf("%s: printed %q, want an error", name, s)
		}
	}
	if s, err := printRule(rule().family(IPv6).daddrNot(podV6).tcp().dport(80).accept()); err != nil || s != "meta nfproto == ipv6 ip6 daddr != 2001:db8::2 meta l4proto == tcp tcp dport == 80 accept" {
		t.Errorf("a well-formed rule printed %q, %v", s, err)
	}
}
