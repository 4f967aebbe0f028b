package redirect

import (
	"strings"
	"testing"
)

// stateDiff reports how after differs from before, line by line: "- "
// for a line only before has, "+ " for one only after has; "" when they
// are equal. The node's ruleset can be thousands of lines, the report is
// only what changed: the lines the two share at the start and at the end
// are dropped, and in between a line is reported as often as its number of
// copies differs, so a rule the tests left behind is one "+" line wherever
// it landed. Lines that are all the same but in another order are
// reported in full.
func stateDiff(before, after string) string {
	if before == after {
		return ""
	}
	b, a := strings.SplitAfter(before, "\n"), strings.SplitAfter(after, "\n")
	for len(b) > 0 && len(a) > 0 && b[0] == a[0] {
		b, a = b[1:], a[1:]
	}
	for len(b) > 0 && len(a) > 0 && b[len(b)-1] == a[len(a)-1] {
		b, a = b[:len(b)-1], a[:len(a)-1]
	}
	n := map[string]int{} // copies in after minus copies in before
	for _, l := range b {
		n[l]--
	}
	for _, l := range a {
		n[l]++
	}
	removed, added := surplus(b, n, -1), surplus(a, n, +1)
	if len(removed)+len(added) == 0 {
		removed, added = b, a // reordered
	}
	var out strings.Builder
	for _, l := range removed {
		out.WriteString("- " + strings.TrimSuffix(l, "\n") + "\n")
	}
	for _, l := range added {
		out.WriteString("+ " + strings.TrimSuffix(l, "\n") + "\n")
	}
	return out.String()
}

// surplus returns, in their order, the lines of ls that have more copies
// on the side sign names (-1: before, +1: after), each as often as it has
// more.
func surplus(ls []string, n map[string]int, sign int) []string {
	left := map[string]int{}
	for l, d := range n {
		if d*sign > 0 {
			left[l] = d * sign
		}
	}
	var out []string
	for _, l := range ls {
		if left[l] > 0 {
			left[l]--
			out = append(out, l)
		}
	}
	return out
}

func TestStateDiff(t *testing.T) {
	ruleset := "table inet filter {\n\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n\t\ttcp dport 22 accept\n\t}\n}\n"
	for _, c := range []struct {
		name, before, after, want string
	}{
		{"equal", ruleset, ruleset, ""},
		{"rule added",
			ruleset,
			strings.Replace(ruleset, "\t\ttcp dport 22 accept\n", "\t\ttcp dport 22 accept\n\t\tmeta mark 0x539 accept\n", 1),
			"+ \t\tmeta mark 0x539 accept\n"},
		{"table left behind, at the end",
			ruleset,
			ruleset + "table inet meshlet {\n}\n",
			"+ table inet meshlet {\n+ }\n"},
		{"rule removed",
			ruleset,
			strings.Replace(ruleset, "\t\ttcp dport 22 accept\n", "", 1),
			"- \t\ttcp dport 22 accept\n"},
		{"a second copy of a line",
			"a\nb\nc\n",
			"a\nb\nb\nc\n",
			"+ b\n"},
		{"changed line",
			"# ip -4 rule\n0: from all lookup local\n32766: from all lookup main\n",
			"# ip -4 rule\n0: from all lookup local\n32764: from all fwmark 0x111/0xfff lookup 100\n32766: from all lookup main\n",
			"+ 32764: from all fwmark 0x111/0xfff lookup 100\n"},
		{"reordered",
			"a\nb\nc\nd\n",
			"a\nc\nb\nd\n",
			"- b\n- c\n+ c\n+ b\n"},
		{"no final newline", "a", "b", "- a\n+ b\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := stateDiff(c.before, c.after); got != c.want {
				t.Fatalf("stateDiff =\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}
