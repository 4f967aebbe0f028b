package redirect

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain guards the machine running the tests: every test works in
// namespaces of its own, and this checks that the test process's own
// network namespace (the real node's, on CI) is exactly as it was.
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
	if after != before {
		fmt.Fprintf(os.Stderr, "redirect tests changed the test process's own network namespace:\n--- after\n%s\n--- before\n%s\n", after, before)
		code = 1
	}
	os.Exit(code)
}

func nodeState() (string, error) {
	var out string
	for _, cmd := range [][]string{
		{"nft", "list", "ruleset"}, {"ip", "-4", "rule"}, {"ip", "-6", "rule"},
		{"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
	} {
		b, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%v: %w: %s", cmd, err, b)
		}
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
