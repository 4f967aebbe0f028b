package flagenv

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

func TestUnknownEnvIsWarnedWithClosestName(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	for _, name := range []string{"ztunnel-socket", "node-name", "state-dir"} {
		fs.String(name, "", "")
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	WarnUnknownEnv(logger, fs, []string{
		"MESHLET_ZTUNEL_SOCKET=/run/z.sock", // a typo
		"MESHLET_SHINY_NEW_THING=1",         // close to nothing
		"MESHLET_NODE_NAME=n",               // a flag's
		"HOME=/root",                        // not ours
		"MESHLET_=x",
	})
	got := map[string]string{} // variable -> didYouMean
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		kv := map[string]string{}
		for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
			kv[fmt.Sprint(e.ParameterKVList[i])] = fmt.Sprint(e.ParameterKVList[i+1])
		}
		got[kv["variable"]] = kv["didYouMean"]
	}
	want := map[string]string{"MESHLET_ZTUNEL_SOCKET": "MESHLET_ZTUNNEL_SOCKET", "MESHLET_SHINY_NEW_THING": "", "MESHLET_": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("warned about %v, want %v (variable: closest known name)", got, want)
	}
}

func TestClosest(t *testing.T) {
	known := []string{"MESHLET_ZTUNNEL_SOCKET", "MESHLET_NODE_NAME", "MESHLET_STATE_DIR", "MESHLET_IPV6"}
	for name, want := range map[string]string{
		"MESHLET_NODENAME":      "MESHLET_NODE_NAME",
		"MESHLET_STATEDIR":      "MESHLET_STATE_DIR",
		"MESHLET_ZTUNNEL_SOCK":  "MESHLET_ZTUNNEL_SOCKET",
		"MESHLET_REDIRECT_MODE": "",
	} {
		if got := closest(name, known); got != want {
			t.Errorf("closest(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestApplyEnvCommandLineWinsAndBadValueNamesBoth(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	sock := fs.String("ztunnel-socket", "/default.sock", "")
	node := fs.String("node-name", "", "")
	fs.Bool("ipv6", true, "")
	if err := fs.Parse([]string{"--ztunnel-socket=/from/flag.sock"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MESHLET_ZTUNNEL_SOCKET": "/from/env.sock", "MESHLET_NODE_NAME": "node-a", "MESHLET_IPV6": "sometimes"}
	err := ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if *sock != "/from/flag.sock" || *node != "node-a" {
		t.Fatalf("ztunnel-socket=%q node-name=%q: want the command line's socket and the environment's node", *sock, *node)
	}
	if err == nil || !strings.Contains(err.Error(), "MESHLET_IPV6") || !strings.Contains(err.Error(), "--ipv6") {
		t.Fatalf("error %v, want one naming MESHLET_IPV6 and --ipv6", err)
	}
}
