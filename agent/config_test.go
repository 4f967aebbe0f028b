package agent

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/internal/flagenv"
)

func parse(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg := DefaultConfig()
	cfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	err := flagenv.ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return cfg, err
}

func TestEnvFillsFlagsCommandLineWins(t *testing.T) {
	cfg, err := parse(t, []string{"--ztunnel-socket=/from/flag.sock"}, map[string]string{
		"MESHLET_ZTUNNEL_SOCKET":          "/from/env.sock",
		"MESHLET_NODE_NAME":               "node-a",
		"MESHLET_EXCLUDED_NAMESPACES":     "kube-system, infra",
		"MESHLET_DENIED_RUNTIME_HANDLERS": "runsc,kata",
		"MESHLET_DNS_CAPTURE":             "false",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ZtunnelSocket != "/from/flag.sock" {
		t.Errorf("ztunnel socket %q: the command line must win over the environment", cfg.ZtunnelSocket)
	}
	if cfg.NodeName != "node-a" || cfg.PodDefaults.DNSCapture {
		t.Errorf("env not applied: %+v", cfg)
	}
	if !slices.Equal(cfg.Policy.ExcludedNamespaces, []string{"kube-system", "infra"}) ||
		!slices.Equal(cfg.Policy.DeniedRuntimeHandlers, []string{"runsc", "kata"}) {
		t.Errorf("lists: %q %q", cfg.Policy.ExcludedNamespaces, cfg.Policy.DeniedRuntimeHandlers)
	}
}

func TestDefaultsAreIstios(t *testing.T) {
	cfg, err := parse(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.PodDefaults.DNSCapture || !cfg.Redirect.IPv6 || !slices.Equal(cfg.Policy.ExcludedNamespaces, []string{"kube-system"}) ||
		cfg.ZtunnelSocket != "/var/run/ztunnel/ztunnel.sock" {
		t.Fatalf("defaults %+v", cfg)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Fatalf("defaults without a node name: %v, want an error naming --node-name", err)
	}
	cfg.NodeName = "n"
	if os.Geteuid() != 0 {
		cfg.StateDir = t.TempDir() // only root may create the default under /var/lib
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBadEnvNamesVariableAndFlag(t *testing.T) {
	_, err := parse(t, nil, map[string]string{"MESHLET_IPV6": "sometimes"})
	if err == nil || !strings.Contains(err.Error(), "MESHLET_IPV6") || !strings.Contains(err.Error(), "--ipv6") {
		t.Fatalf("error %v, want one naming MESHLET_IPV6 and --ipv6", err)
	}
}

func TestValidateNamesFlag(t *testing.T) {
	for _, c := range []struct{ arg, flag string }{
		{"--ztunnel-socket=", "--ztunnel-socket"},
		{"--dataplane-mode-label=", "--dataplane-mode-label"},
		{"--dataplane-mode-label=istio.io/data plane", "--dataplane-mode-label"},
		{"--excluded-namespaces=kube-system,Istio_System", "--excluded-namespaces"},
		{"--denied-runtime-handlers=runsc,gVisor", "--denied-runtime-handlers"},
		{"--nri-socket=", "--nri-socket"},
		{"--nri-plugin-index=7", "--nri-plugin-index"},
		{"--nri-plugin-index=a1", "--nri-plugin-index"},
		{"--enroll-timeout=2s", "--enroll-timeout"},
		{"--enroll-timeout=0s", "--enroll-timeout"},
		{"--cri-resync-interval=500ms", "--cri-resync-interval"},
		{"--health-addr=9880", "--health-addr"},
		{"--cni-conf-dir=etc/cni/net.d", "--cni-conf-dir"},
		{"--cni-bin-dir=", "--cni-bin-dir"},
		{"--cni-socket=cni.sock", "--cni-socket"},
		{"--cni-plugin-binary=meshlet-cni", "--cni-plugin-binary"},
		{"--mode=cni", "--standalone"}, // CNI passes no labels: the API server is needed
		{"--pod-name=meshlet-x", "--pod-namespace"},
		{"--config-map=meshlet/settings", "--config-map"}, // with --standalone: no API server
	} {
		cfg, err := parse(t, []string{"--standalone", c.arg}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: Validate = %v, want an error naming %s", c.arg, err, c.flag)
		}
	}
}

func TestEnumFlagsRejectUnknownValues(t *testing.T) {
	for arg, want := range map[string]string{
		"--mode=ebpf":             `unknown mode "ebpf" (want auto, nri or cni)`,
		"--redirect-backend=ebpf": `unknown redirect backend "ebpf" (want nftables or iptables)`,
		"--iptables-variant=new":  `unknown iptables variant "new" (want auto, nft or legacy)`,
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg := DefaultConfig()
		cfg.AddFlags(fs)
		if err := fs.Parse([]string{arg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %s", arg, err, want)
		}
	}
}

func TestStateDirMustBeADirectory(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		file:                                 "exists and is not a directory",
		filepath.Join(file, "sub"):           file + " is not a directory",
		tmp:                                  "",
		filepath.Join(tmp, "missing", "sub"): "", // created on start-up
	} {
		cfg, err := parse(t, []string{"--standalone", "--state-dir=" + dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Validate()
		if want == "" {
			if err != nil {
				t.Errorf("--state-dir=%s: %v", dir, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "--state-dir") || !strings.Contains(err.Error(), want) {
			t.Errorf("--state-dir=%s: Validate = %v, want an error naming --state-dir saying %q", dir, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "missing")); err == nil {
		t.Error("Validate created the state directory")
	}
}

func TestSocketPathLengthIsChecked(t *testing.T) {
	dir := "/" + strings.Repeat("d", 50) + "/"
	fits := dir + strings.Repeat("s", maxSocketPath-len(dir))
	tooLong := fits + "s"
	for _, flagName := range []string{"--ztunnel-socket", "--nri-socket", "--cni-socket"} {
		cfg, err := parse(t, []string{"--standalone", "--state-dir=" + t.TempDir(), flagName + "=" + fits}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s of %d bytes: %v", flagName, len(fits), err)
		}
		cfg, err = parse(t, []string{"--standalone", flagName + "=" + tooLong}, nil)
		if err != nil {
			t.Fatal(err)
		}
		limit := fmt.Sprintf("sun_path is %d bytes", maxSocketPath+1)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), flagName) || !strings.Contains(err.Error(), limit) {
			t.Errorf("%s of %d bytes: Validate = %v, want an error naming %s and saying %q", flagName, len(tooLong), err, flagName, limit)
		}
	}
	if runtime.GOOS == "linux" && maxSocketPath != 107 {
		t.Errorf("maxSocketPath = %d, want 107 on Linux (sun_path is 108 bytes)", maxSocketPath)
	}
}

func TestNodeSettingsFlags(t *testing.T) {
	cfg, err := parse(t, []string{"--node-name=n", "--config-map=meshlet/a", "--config-map=istio-system/b,meshlet/c", "-v=4"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (kube.ObjectRefList{Dst: &cfg.ConfigMaps}).String(); got != "meshlet/a,istio-system/b,meshlet/c" || cfg.LogVerbosity != 4 {
		t.Fatalf("config maps %s, verbosity %d", got, cfg.LogVerbosity)
	}
	for arg, want := range map[string]string{"-v=11": "want 0 to 10", "--config-map=settings": "NAMESPACE/NAME"} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c := DefaultConfig()
		c.AddFlags(fs)
		if err := fs.Parse([]string{arg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal with %q", arg, err, want)
		}
	}
	// -v sets klog's verbosity as it parses; back to this test's.
	t.Cleanup(func() { _ = setLogVerbosity(0) })
	cfg, err = parse(t, []string{"--node-name=n", "--config-map=meshlet/a,meshlet/a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a ConfigMap twice: Validate = %v", err)
	}
	// The environment variable: comma-separated.
	cfg, err = parse(t, []string{"--node-name=n"}, map[string]string{"MESHLET_CONFIG_MAP": "meshlet/a,meshlet/b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.ConfigMaps) != 2 {
		t.Fatalf("MESHLET_CONFIG_MAP: %v", cfg.ConfigMaps)
	}
}

// --revision is refused, naming what it needs, where it cannot work: a
// bad name, no API server, CNI mode, the DRA plugin.
func TestRevisionFlags(t *testing.T) {
	node := "--node-name=n1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{node, "--dra=false", "--revision=Canary"}, "--revision"},
		{[]string{node, "--dra=false", "--revision=a-revision-name-of-21c"}, "at most 20 characters"},
		{[]string{"--standalone", "--revision=canary"}, "drop --standalone"},
		{[]string{node, "--dra=false", "--mode=cni", "--revision=canary"}, "--revision needs NRI"},
		{[]string{node, "--revision=canary"}, "--dra=false"},
		{[]string{node, "--dra=false", "--revisionless-pods=skip"}, "--revisionless-pods=skip needs --revision"},
	} {
		cfg, err := parse(t, c.args, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: Validate = %v, want an error saying %s", c.args, err, c.want)
		}
	}
	cfg, err := parse(t, []string{node, "--dra=false", "--state-dir=" + t.TempDir()},
		map[string]string{"MESHLET_REVISION": "canary", "MESHLET_REVISIONLESS_PODS": "enroll"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("--revision=canary --revisionless-pods=enroll: %v", err)
	}
	if cfg.Policy.Revision != "canary" || cfg.Policy.RevisionlessPods != "enroll" {
		t.Errorf("from the environment: revision %q, revisionless pods %q", cfg.Policy.Revision, cfg.Policy.RevisionlessPods)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg = DefaultConfig()
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--revisionless-pods=sometimes"}); err == nil || !strings.Contains(err.Error(), "want default-tag, enroll or skip") {
		t.Errorf("--revisionless-pods=sometimes: %v", err)
	}
}

// --node-taint and --node-condition are refused, naming the flag, where
// they cannot work: a key that is no qualified name, no API server, a
// revision (one taint per node).
func TestNodeReadinessFlags(t *testing.T) {
	node := "--node-name=n1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{node, "--node-taint=not a key"}, `--node-taint="not a key"`},
		{[]string{node, "--node-condition=mesh.example.com/"}, "--node-condition"},
		{[]string{"--standalone", "--node-taint=mesh.example.com/not-ready"}, "--node-taint needs the API server"},
		{[]string{node, "--dra=false", "--revision=canary", "--node-condition=mesh.example.com/MeshReady"}, "--node-condition with --revision"},
	} {
		cfg, err := parse(t, c.args, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: Validate = %v, want an error saying %s", c.args, err, c.want)
		}
	}
	cfg, err := parse(t, []string{node, "--state-dir=" + t.TempDir()}, map[string]string{"MESHLET_NODE_TAINT": "mesh.example.com/not-ready"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil || cfg.NodeTaint != "mesh.example.com/not-ready" {
		t.Errorf("MESHLET_NODE_TAINT: %q, %v", cfg.NodeTaint, err)
	}
}
