package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every case fails before anything starts: run never reaches agent.Run.

func TestHelpShowsEachFlagsVariable(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-h"}, nil, &out, &out); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	usage := out.String()
	for _, flagAndVar := range [][2]string{
		{"--ztunnel-socket", "(env MESHLET_ZTUNNEL_SOCKET)"},
		{"--state-dir", "(env MESHLET_STATE_DIR)"},
		{"-v", "(env MESHLET_V)"},
	} {
		i := strings.Index(usage, "\n  "+flagAndVar[0]+" ")
		if i < 0 {
			t.Fatalf("-h does not list %s:\n%s", flagAndVar[0], usage)
		}
		entry := usage[i+1:]
		if next := strings.Index(entry, "\n  -"); next >= 0 { // the following flag
			entry = entry[:next]
		}
		if !strings.Contains(entry, flagAndVar[1]) {
			t.Errorf("-h: %s does not say %s:\n%s", flagAndVar[0], flagAndVar[1], entry)
		}
	}
	if !strings.Contains(usage, "the command line wins") {
		t.Errorf("-h does not explain the environment:\n%s", usage)
	}
}

func TestBadSettingsExitWithStatus2NamingThem(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		args    []string
		environ []string
		want    string
	}{
		{"state dir is a file", []string{"--standalone", "--state-dir=" + file}, nil, "--state-dir"},
		{"state dir from env is a file", nil, []string{"MESHLET_STANDALONE=true", "MESHLET_STATE_DIR=" + file}, "--state-dir"},
		{"socket path too long", []string{"--standalone", "--ztunnel-socket=/run/" + strings.Repeat("z", 120)}, nil, "--ztunnel-socket"},
		{"bad variable", nil, []string{"MESHLET_STANDALONE=maybe"}, "MESHLET_STANDALONE"},
		{"bad flag", []string{"--redirect-backend=ebpf"}, nil, "want nftables or iptables"},
		{"health socket path too long", []string{"--standalone", "--health-socket=/run/" + strings.Repeat("h", 120)}, nil, "--health-socket"},
		{"probe without an endpoint", []string{"probe"}, nil, "meshlet probe: want one argument, readyz|healthz"},
		{"probe with two endpoints", []string{"probe", "readyz", "healthz"}, nil, "want one argument"},
		{"argument to a command without one", []string{"status", "pods"}, nil, `want no arguments, got ["pods"]`},
	} {
		var out bytes.Buffer
		if code := run(c.args, c.environ, &out, &out); code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: exit %d, output %q; want exit 2 and a message naming %s", c.name, code, out.String(), c.want)
		}
	}
}

// TestProbeExitStatus: meshlet probe exits 0 only when meshlet answers ok
// (the kubelet's exec probe reads the status), naming what went wrong
// otherwise.
func TestProbeExitStatus(t *testing.T) {
	var out bytes.Buffer
	sock := filepath.Join(t.TempDir(), "health.sock")
	if code := run([]string{"probe", "readyz"}, []string{"MESHLET_HEALTH_SOCKET=" + sock}, &out, &out); code != 1 || !strings.Contains(out.String(), "ask meshlet at "+sock) {
		t.Errorf("probe with no meshlet: exit %d, output %q; want exit 1 naming the socket", code, out.String())
	}
	out.Reset()
	if code := run([]string{"probe", "livez"}, []string{"MESHLET_HEALTH_SOCKET=" + sock}, &out, &out); code != 2 || !strings.Contains(out.String(), "want one of readyz, healthz") {
		t.Errorf("probe livez: exit %d, output %q; want exit 2 naming the endpoints", code, out.String())
	}
}
