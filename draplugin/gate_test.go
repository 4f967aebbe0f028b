package draplugin

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func gateConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src", GateBinaryName)
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	// A stand-in for meshlet-gate that answers -h as it does (usage,
	// exit 2); the end-to-end tests install the real one.
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho '  -socket string'\nexit 2\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Gate.CDISpecDir = filepath.Join(dir, "cdi")
	c.Gate.HookDir = filepath.Join(dir, "opt", "meshlet", "bin")
	c.Gate.HookBinary = src
	return c
}

// TestCDISpecGolden: the spec the runtime reads, byte for byte: one device
// whose createRuntime hook runs meshlet-gate with the socket and deadline,
// and a runtime-side timeout above the hook's own.
func TestCDISpecGolden(t *testing.T) {
	c := DefaultConfig()
	got, err := c.CDISpec()
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "cdi-spec.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("CDI spec:\n%s\nwant (%s; go test -update rewrites it):\n%s", got, golden, want)
	}
	if id := c.CDIDeviceID(); id != "mesh.meshlet.dev/mesh=gate" {
		t.Fatalf("CDI device id %q", id)
	}
}

// TestInstallGate: the hook and the spec are written where the runtime
// reads them, the hook executable by it; writing again when nothing
// changed replaces neither file (an update's two meshlets, or a restart,
// cause no churn), a changed setting rewrites the spec, and uninstalling
// removes both.
func TestInstallGate(t *testing.T) {
	c := gateConfig(t)
	if err := c.InstallGate(); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(c.Gate.HookDir, GateBinaryName)
	spec := filepath.Join(c.Gate.CDISpecDir, "mesh.meshlet.dev-mesh.json")
	hfi, err := os.Stat(hook)
	if err != nil || hfi.Mode().Perm() != 0o755 {
		t.Fatalf("hook: %v, %v; want mode 0755", hfi, err)
	}
	sfi, err := os.Stat(spec)
	if err != nil || sfi.Mode().Perm() != 0o644 {
		t.Fatalf("spec: %v, %v; want mode 0644", sfi, err)
	}
	if err := c.InstallGate(); err != nil {
		t.Fatal(err)
	}
	for path, before := range map[string]os.FileInfo{hook: hfi, spec: sfi} {
		after, err := os.Stat(path)
		if err != nil || !os.SameFile(before, after) {
			t.Fatalf("%s replaced although nothing changed", path)
		}
	}
	c.Gate.Timeout = 3 * time.Second
	if err := c.InstallGate(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(spec); err != nil || !strings.Contains(string(b), `"--timeout=3s"`) {
		t.Fatalf("spec after a changed timeout: %s, %v", b, err)
	}
	ents, err := os.ReadDir(c.Gate.CDISpecDir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("spec directory holds %v, %v: want the spec alone (no temporary file)", ents, err)
	}
	if err := c.RemoveGate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{hook, spec} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s after RemoveGate: %v", p, err)
		}
	}
	if err := c.RemoveGate(); err != nil {
		t.Fatalf("RemoveGate of nothing: %v", err)
	}
}

// TestInstallGateMissingBinary: a meshlet without meshlet-gate refuses to
// start, naming the flag, and writes no spec that would name a hook that
// is not there.
func TestInstallGateMissingBinary(t *testing.T) {
	c := gateConfig(t)
	c.Gate.HookBinary = filepath.Join(t.TempDir(), "absent")
	err := c.InstallGate()
	if err == nil || !strings.Contains(err.Error(), "--gate-hook-binary") {
		t.Fatalf("err %v, want one naming --gate-hook-binary", err)
	}
	if _, err := os.Stat(c.Gate.CDISpecDir); !os.IsNotExist(err) {
		t.Fatalf("spec directory created: %v", err)
	}
}

// TestInstallGateHookMustRun: a hook that does not run on this node (here
// one that is not meshlet-gate at all) is refused at start-up, not found
// at each container start.
func TestInstallGateHookMustRun(t *testing.T) {
	c := gateConfig(t)
	if err := os.WriteFile(c.Gate.HookBinary, []byte("\x7fELF garbage"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := c.InstallGate()
	if err == nil || !strings.Contains(err.Error(), "does not run here") {
		t.Fatalf("err %v, want a refusal saying the hook does not run", err)
	}
}

// TestGateConfigValidate: each bad setting is refused naming its flag.
func TestGateConfigValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*GateConfig)
		want string
	}{
		"relative spec dir": {func(g *GateConfig) { g.CDISpecDir = "cdi" }, "--cdi-spec-dir"},
		"relative hook dir": {func(g *GateConfig) { g.HookDir = "" }, "--gate-hook-dir"},
		"relative socket":   {func(g *GateConfig) { g.Socket = "gate.sock" }, "--gate-socket"},
		"relative binary":   {func(g *GateConfig) { g.HookBinary = "meshlet-gate" }, "--gate-hook-binary"},
		"timeout too short": {func(g *GateConfig) { g.Timeout = time.Millisecond }, "--gate-timeout=1ms"},
		"timeout too long":  {func(g *GateConfig) { g.Timeout = time.Minute }, "--gate-timeout=1m0s"},
	} {
		t.Run(name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mut(&c.Gate)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
	c := DefaultConfig()
	c.DriverName = "1mesh.example.com" // a DNS subdomain, not a CDI vendor
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "CDI vendor") {
		t.Fatalf("driver name starting with a digit: %v, want a refusal naming the CDI vendor rule", err)
	}
	c = DefaultConfig()
	c.Gate = GateConfig{Timeout: -1} // off: nothing else is checked
	if err := c.Validate(); err != nil {
		t.Fatalf("gate off: %v", err)
	}
}
