package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent"
)

// TestCLIErrors: each mistake gets one line that names the flag, the
// argument or the command and what it wants, then where the help is,
// and exit status 2 (testdata/cli-errors.golden; go test -update
// rewrites it).
func TestCLIErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	// --vmodule is klog's, global: leave it as it was for other tests.
	t.Cleanup(func() {
		cfg := agent.DefaultConfig()
		if err := newFlagSet(&cfg).Set("vmodule", ""); err != nil {
			t.Error(err)
		}
	})
	cases := [][]string{
		{"--enroll-timeout=abc"},
		{"--standalone=maybe"},
		{"--nri-plugin-index", "x"},
		{"--ztunel-socket=/run/zt.sock"},
		{"--state-dir"},
		{"statsu"},
		{"status", "pods"},
		{"status", "-o", "xml"},
		{"status", "--state=broken"},
		{"probe"},
		{"probe", "livez"},
		{"release-nodes"},
		{"--mode=ebpf", "status"},
		{"--redirect-backend=ebpf", "--standalone"},
		{"-v=abc"},
		{"status", "-x"},
		{"status", "-o"},
		{"--log-format=yaml"},
		{"--log-format=json", "--vmodule=enroll=4", "version"},
		{"uninstall-cni", "--cni-conf-dir=" + missing},
	}
	var got bytes.Buffer
	for _, args := range cases {
		var stdout, stderr bytes.Buffer
		code := run(args, []string{"MESHLET_STATE_DIR=" + t.TempDir()}, &stdout, &stderr)
		fmt.Fprintf(&got, "$ meshlet %s\n%s%sexit %d\n\n", strings.ReplaceAll(strings.Join(args, " "), missing, "MISSING"), stdout.String(),
			strings.ReplaceAll(stderr.String(), missing, "MISSING"), code)
	}
	golden(t, "testdata/cli-errors.golden", got.Bytes())
}

// TestCommandFlagsReadNoVariable: a command's own flags (status -o) are
// the command line's; MESHLET_O is no setting.
func TestCommandFlagsReadNoVariable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, []string{"MESHLET_O=json"}, &stdout, &stderr); code != 0 || strings.HasPrefix(stdout.String(), "{") {
		t.Fatalf("MESHLET_O=json meshlet version: exit %d, %q; want the text form", code, stdout.String())
	}
}

// TestFlagsAnywhere: flags may come before a command, after it, and
// after its argument.
func TestFlagsAnywhere(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "health.sock")
	for _, args := range [][]string{
		{"--health-socket=" + sock, "probe", "readyz"},
		{"probe", "--health-socket=" + sock, "readyz"},
		{"probe", "readyz", "--health-socket", sock},
	} {
		var out bytes.Buffer
		// No meshlet answers there: the probe got as far as asking it.
		if code := run(args, nil, &out, &out); code != 1 || !strings.Contains(out.String(), "ask meshlet at "+sock) {
			t.Errorf("meshlet %s: exit %d, %q; want exit 1 asking %s", strings.Join(args, " "), code, out.String(), sock)
		}
	}
}

// TestCommandHelp: each command has help of its own, exit 0, naming its
// flags and the settings it reads.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		var stdout, stderr bytes.Buffer
		if code := run([]string{c.name, "--help"}, nil, &stdout, &stderr); code != 0 || stderr.Len() > 0 {
			t.Errorf("%s --help: exit %d, stderr %q", c.name, code, stderr.String())
		}
		if !strings.HasPrefix(stdout.String(), "Usage: meshlet "+c.name) {
			t.Errorf("%s --help does not start with its usage:\n%s", c.name, stdout.String())
		}
		for _, name := range c.reads {
			if !strings.Contains(stdout.String(), "  --"+name+" ") && !strings.Contains(stdout.String(), "  --"+name+"\n") {
				t.Errorf("%s --help does not list --%s, which it reads", c.name, name)
			}
		}
	}
	var stdout bytes.Buffer
	run([]string{"status", "--help"}, nil, &stdout, &stdout)
	for _, want := range []string{"-o string", "--brief", "--all", "--namespace string", "--state string", "Exit status: 0 when the node is ready"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("status --help lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestFlagGroups: meshlet --help lists every flag once, in an area.
func TestFlagGroups(t *testing.T) {
	cfg := agent.DefaultConfig()
	fs := newFlagSet(&cfg)
	var grouped []string
	for _, g := range flagGroups {
		for _, name := range g.flags {
			if fs.Lookup(name) == nil {
				t.Errorf("group %q names --%s, which is no flag", g.title, name)
			}
			if slices.Contains(grouped, name) {
				t.Errorf("--%s is in two groups", name)
			}
			grouped = append(grouped, name)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(grouped, f.Name) {
			t.Errorf("--%s is in no group of meshlet --help: add it to flagGroups", f.Name)
		}
	})
}

// golden compares got with the file at path (go test -update rewrites it).
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run go test ./cmd/meshlet -update", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs (go test ./cmd/meshlet -update rewrites it); got:\n%s", path, got)
	}
}
