package kubectlmeshlet

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestCLIErrors: a wrong command line is one line and where the help is,
// exit status 2; nothing is asked of the cluster (golden file).
func TestCLIErrors(t *testing.T) {
	lines := [][]string{
		{"statsu"},
		{"status", "--nod", "a"},
		{"status", "-o", "wide"},
		{"status", "extra"},
		{"version", "--node"},
		{"bug-report", "--tail", "many"},
		{"--bogus"},
		{"-n"},
	}
	var all strings.Builder
	for _, args := range lines {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr, func(context.Context, globalFlags) (*cluster, error) {
			t.Errorf("%v: connected to the cluster", args)
			return nil, fmt.Errorf("no cluster")
		})
		fmt.Fprintf(&all, "$ kubectl meshlet %s\n%s%sexit %d\n\n", strings.Join(args, " "), stdout.String(), stderr.String(), code)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	golden(t, "cli-errors.golden", all.String())
}

// TestHelp: the plugin's help and each command's list the commands and
// flags; flags may come before the command.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {}, {"help"}} {
		var out bytes.Buffer
		if code := run(context.Background(), args, &out, &out, nil); code != ExitOK || !strings.Contains(out.String(), "bug-report") {
			t.Errorf("%v: exit %d:\n%s", args, code, out.String())
		}
	}
	for _, c := range commands {
		var out bytes.Buffer
		code := run(context.Background(), []string{"-n", "x", c.name, "--help"}, &out, &out, nil)
		if code != ExitOK || !strings.Contains(out.String(), "--kubeconfig") || !strings.Contains(out.String(), "Exit status") {
			t.Errorf("%s --help: exit %d:\n%s", c.name, code, out.String())
		}
	}
	var out bytes.Buffer
	run(context.Background(), []string{"status", "--help"}, &out, &out, nil)
	golden(t, "status-help.golden", out.String())
}
