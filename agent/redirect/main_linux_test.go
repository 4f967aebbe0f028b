package redirect

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// TestMain guards the machine running the tests: every test works in
// namespaces of its own, and this checks that the test process's own
// network namespace (the real node's, on CI) is exactly as it was. Without
// root no test can change it (they skip), so there is nothing to guard.
func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	before, err := nodeState()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redirect tests: read node state:", err)
		os.Exit(1)
	}
	code := m.Run()
	after, err := nodeState()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redirect tests: read node state:", err)
		os.Exit(1)
	}
	if d := stateDiff(before, after); d != "" {
		fmt.Fprintf(os.Stderr, "redirect tests changed the test process's own network namespace (- before, + after):\n%s", d)
		code = 1
	}
	os.Exit(code)
}

// nodeState dumps what the tests could change in the current network
// namespace: the nftables ruleset, stateless (-s), because the node's own
// traffic moves the counters of its rules (kubelet's, kube-proxy's,
// Docker's) while the tests run; the ip rules; meshlet's routing table.
func nodeState() (string, error) {
	var out string
	for _, cmd := range [][]string{
		{"nft", "-s", "list", "ruleset"}, {"ip", "-4", "rule"}, {"ip", "-6", "rule"},
		{"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
	} {
		b, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%v: %w: %s", cmd, err, b)
		}
		out += "# " + strings.Join(cmd, " ") + "\n"
		if cmd[0] == "ip" && cmd[2] == "route" {
			// Only meshlet's routing table: the node's own routes may
			// legitimately change while the tests run.
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, fmt.Sprintf("table %d ", RouteTable)) {
					out += line + "\n"
				}
			}
			continue
		}
		out += string(b)
	}
	return out, nil
}

// TestNodeStateIgnoresCounters: traffic that moves a rule's counter, as
// the node's own traffic does all the time, changes nothing the guard
// compares.
func TestNodeStateIgnoresCounters(t *testing.T) {
	h := podNetns(t)
	inNetns(t, h, "nft", "add table inet guardtest; add chain inet guardtest out { type filter hook output priority 0; }; add rule inet guardtest out counter accept")
	var before, beforeFull string
	must(t, netnstest.Run(h, func() error {
		var err error
		if before, err = nodeState(); err != nil {
			return err
		}
		beforeFull, err = execOutput("nft", "list", "ruleset")
		return err
	}))
	must(t, netnstest.Run(h, func() error {
		c, err := net.Dial("udp", "127.0.0.1:9")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("counted"))
		return err
	}))
	var after string
	must(t, netnstest.Run(h, func() error {
		var err error
		after, err = nodeState()
		return err
	}))
	// The traffic did move the counter…
	if full := inNetns(t, h, "nft", "list", "ruleset"); full == beforeFull {
		t.Fatalf("the counter did not move, so this proves nothing:\n%s", full)
	}
	// …and the guard does not see it.
	if d := stateDiff(before, after); d != "" {
		t.Fatalf("counter traffic changed the guarded state:\n%s", d)
	}
	if !strings.Contains(after, "table inet guardtest") {
		t.Fatalf("the guarded state misses the ruleset:\n%s", after)
	}
}
