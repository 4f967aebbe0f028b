package redirect

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The pod's addresses, in the kernel tests' topology and in the rule cases.
var (
	podV4 = netip.MustParseAddr("192.0.2.2")
	podV6 = netip.MustParseAddr("2001:db8::2")
)

// ruleCase is a pod whose rules the golden files record: the kernel tests
// apply it to a real netns, the pure tests render its plan.
type ruleCase struct {
	name     string
	ips      []netip.Addr
	settings enroll.Settings
	// ipv6 is the node's --ipv6.
	ipv6 bool
}

var ruleCases = []ruleCase{
	{"ipv4", []netip.Addr{podV4}, enroll.Settings{DNSCapture: true}, true},
	{"ipv6", []netip.Addr{podV6}, enroll.Settings{DNSCapture: true}, true},
	{"dual", []netip.Addr{podV4, podV6}, enroll.Settings{DNSCapture: true}, true},
	{"dual_ipv6_disabled", []netip.Addr{podV4, podV6}, enroll.Settings{DNSCapture: true}, false},
	{"dns_off", []netip.Addr{podV4, podV6}, enroll.Settings{}, true},
	{"bypass_inbound", []netip.Addr{podV4, podV6}, enroll.Settings{DNSCapture: true, BypassInbound: true}, true},
}

// ipv6Setting configures a redirector with the case's --ipv6.
func (c ruleCase) ipv6Setting(cfg *Config) { cfg.IPv6 = c.ipv6 }

func ruleCaseNamed(t testing.TB, name string) ruleCase {
	t.Helper()
	for _, c := range ruleCases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no rule case %q", name)
	return ruleCase{}
}

// plan is the case's Plan; a case must have one.
func (c ruleCase) plan(t testing.TB) Plan {
	t.Helper()
	p, err := PlanFor(c.ips, c.settings, c.ipv6)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return p
}

// checkGolden compares got with testdata/name.golden; -update rewrites the
// file instead.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	compareGolden(t, name, got)
}

// compareGolden fails unless got is testdata/name.golden.
func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./agent/redirect -run '%s' -update` to create it; the kernel tests need root)", err, t.Name())
	}
	if got != string(want) {
		t.Fatalf("%s differs from %s (if the change is intended: rerun with -update, and bump RulesVersion when the installed rules changed)\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}
