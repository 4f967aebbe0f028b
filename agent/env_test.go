package agent

import (
	"flag"
	"fmt"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

func TestUnknownEnvIsWarnedWithClosestName(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg := DefaultConfig()
	cfg.AddFlags(fs)
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
