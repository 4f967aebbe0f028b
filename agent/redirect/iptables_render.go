package redirect

import (
	"fmt"
	"strings"
)

// The iptables backend writes the rules of Istio's in-pod mode (≥ 1.24,
// REDIRECT) verbatim, so `iptables-save` in a meshlet pod reads like one
// enrolled by istio-cni. This file renders iptables-restore input; it is
// pure text and portable.

const (
	chainPrert  = "ISTIO_PRERT"
	chainOutput = "ISTIO_OUTPUT"
)

// ruleset is what iptables-save shows of a family in a netns: per table,
// the user chains and the rules.
type ruleset map[string]*savedTable

type savedTable struct {
	chains map[string]bool
	rules  []string // "-A CHAIN ..." lines
}

// parseSave reads iptables-save output.
func parseSave(out string) ruleset {
	rs := ruleset{}
	var cur *savedTable
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &savedTable{chains: map[string]bool{}}
			rs[line[1:]] = cur
		case cur == nil || line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
		case strings.HasPrefix(line, ":"):
			cur.chains[strings.Fields(line[1:])[0]] = true
		case strings.HasPrefix(line, "-A "):
			cur.rules = append(cur.rules, line)
		}
	}
	return rs
}

func (rs ruleset) has(table, line string) bool {
	t := rs[table]
	if t == nil {
		return false
	}
	for _, r := range t.rules {
		if r == line {
			return true
		}
	}
	return false
}

func (rs ruleset) hasChain(table, chain string) bool {
	return rs[table] != nil && rs[table].chains[chain]
}

// jumps are the hooks into Istio's chains, per table.
var jumps = map[string][]string{
	"mangle": {"-A PREROUTING -j " + chainPrert, "-A OUTPUT -j " + chainOutput},
	"nat":    {"-A OUTPUT -j " + chainOutput, "-A PREROUTING -j " + chainPrert},
	"raw":    {"-A PREROUTING -j " + chainPrert, "-A OUTPUT -j " + chainOutput},
}

var tableOrder = []string{"mangle", "nat", "raw"}

// renderApply returns iptables-restore --noflush input that makes the
// family's Istio chains exactly what p wants. Declaring a chain that exists
// flushes it, so stale or partial rules are replaced; jumps already present
// are not added twice.
func renderApply(p Plan, f Family, cur ruleset) string {
	lo := f.loopback().String() + "/32"
	if f == IPv6 {
		lo = f.loopback().String() + "/128"
	}
	probe := f.probeAddr().String()
	mark := fmt.Sprintf("%#x/%#x", ProxyMark, MarkMask)
	conn := fmt.Sprintf("%#x/%#x", ConnMark, MarkMask)

	rules := map[string][]string{}
	if p.InboundCapture {
		rules["mangle"] = append(rules["mangle"], "-A ISTIO_PRERT -m mark --mark "+mark+" -j CONNMARK --set-xmark "+conn)
	}
	rules["mangle"] = append(rules["mangle"],
		"-A ISTIO_OUTPUT -m connmark --mark "+conn+" -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff")
	if p.InboundCapture {
		rules["nat"] = append(rules["nat"],
			"-A ISTIO_PRERT -s "+probe+" -p tcp -m tcp -j ACCEPT")
	}
	rules["nat"] = append(rules["nat"], "-A ISTIO_OUTPUT -d "+probe+" -p tcp -m tcp -j ACCEPT")
	if p.InboundCapture {
		rules["nat"] = append(rules["nat"], fmt.Sprintf(
			"-A ISTIO_PRERT ! -d %s -p tcp ! --dport %d -m mark ! --mark %s -j REDIRECT --to-ports %d", lo, PortHBONE, mark, PortInbound))
	}
	if p.DNSCapture {
		rules["nat"] = append(rules["nat"],
			fmt.Sprintf("-A ISTIO_OUTPUT ! -o lo -p udp -m mark ! --mark %s -m udp --dport 53 -j REDIRECT --to-port %d", mark, PortDNS),
			fmt.Sprintf("-A ISTIO_OUTPUT ! -d %s -p tcp --dport 53 -m mark ! --mark %s -j REDIRECT --to-ports %d", lo, mark, PortDNS))
		rules["raw"] = append(rules["raw"],
			fmt.Sprintf("-A ISTIO_OUTPUT -p udp -m mark --mark %s -m udp --dport 53 -j CT --zone %d", mark, DNSConntrackZone),
			fmt.Sprintf("-A ISTIO_PRERT -p udp -m mark ! --mark %s -m udp --sport 53 -j CT --zone %d", mark, DNSConntrackZone))
	}
	rules["nat"] = append(rules["nat"],
		"-A ISTIO_OUTPUT -p tcp -m mark --mark "+conn+" -j ACCEPT",
		"-A ISTIO_OUTPUT ! -d "+lo+" -o lo -j ACCEPT",
		fmt.Sprintf("-A ISTIO_OUTPUT ! -d %s -p tcp -m mark ! --mark %s -j REDIRECT --to-ports %d", lo, mark, PortOutbound))

	var b strings.Builder
	for _, table := range tableOrder {
		if table == "raw" && !p.DNSCapture {
			b.WriteString(renderRemoveTable(table, cur)) // DNS capture turned off: drop stale raw chains
			continue
		}
		fmt.Fprintf(&b, "*%s\n:%s - [0:0]\n:%s - [0:0]\n", table, chainPrert, chainOutput)
		for _, j := range jumps[table] {
			if !cur.has(table, j) {
				b.WriteString(j + "\n")
			}
		}
		for _, r := range rules[table] {
			b.WriteString(r + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// renderRemove returns iptables-restore --noflush input that removes every
// Istio chain and jump of the family; "" when there is nothing to remove.
func renderRemove(cur ruleset) string {
	var b strings.Builder
	for _, table := range tableOrder {
		b.WriteString(renderRemoveTable(table, cur))
	}
	return b.String()
}

func renderRemoveTable(table string, cur ruleset) string {
	var b strings.Builder
	for _, j := range jumps[table] {
		if cur.has(table, j) {
			b.WriteString("-D" + strings.TrimPrefix(j, "-A") + "\n")
		}
	}
	for _, c := range []string{chainPrert, chainOutput} {
		if cur.hasChain(table, c) {
			fmt.Fprintf(&b, "-F %s\n-X %s\n", c, c)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "*" + table + "\n" + b.String() + "COMMIT\n"
}
