package draplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/meshlet/meshlet/draplugin/gate"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// Names of the container gate on the node.
const (
	// GateBinaryName is the hook's file name, in GateConfig.HookDir.
	GateBinaryName = "meshlet-gate"
	// cdiClass is the CDI class of the gate's device: its kind is
	// "<driver>/mesh".
	cdiClass = "mesh"
	// cdiDevice is the CDI device every mesh container gets.
	cdiDevice = "gate"
	// cdiVersion is the CDI spec version written: the oldest that has
	// everything the spec uses (device edits with hooks), so that runtimes
	// with an older CDI library read it too.
	cdiVersion = "0.3.0"
	// tempPrefix begins the temporary files of atomic writes: the ".tmp-…"
	// ending keeps them out of the runtime's scan of *.json specs.
	tempPrefix = ".meshlet-"
)

// GateConfig is the container gate: a CDI device on the mesh device whose
// createRuntime hook (meshlet-gate) refuses a container of a mesh pod
// that is not enrolled.
type GateConfig struct {
	// Enabled adds the gate to every prepared mesh device. Off, meshlet
	// still answers on Socket: containers of pods prepared while it was
	// on keep starting.
	Enabled bool
	// CDISpecDir is one of the runtime's CDI spec directories (containerd
	// 2.x and CRI-O read /etc/cdi and /var/run/cdi).
	CDISpecDir string
	// HookDir is the host directory meshlet copies meshlet-gate into; the
	// runtime runs it from there.
	HookDir string
	// HookBinary is the meshlet-gate to copy (empty: next to meshlet's
	// own executable).
	HookBinary string
	// Socket is where meshlet answers the hook.
	Socket string
	// Timeout is how long the hook waits for meshlet's answer before it
	// refuses the container.
	Timeout time.Duration
}

// DefaultGateConfig is on, with the runtimes' default CDI directory.
func DefaultGateConfig() GateConfig {
	return GateConfig{Enabled: true, CDISpecDir: "/var/run/cdi", HookDir: "/opt/meshlet/bin", Socket: gate.DefaultSocket, Timeout: gate.DefaultTimeout}
}

// Validate reports the first setting that cannot work, naming its flag.
func (g GateConfig) Validate() error {
	if !g.Enabled {
		return nil
	}
	for _, p := range []struct{ flag, path string }{{"--cdi-spec-dir", g.CDISpecDir}, {"--gate-hook-dir", g.HookDir}, {"--gate-socket", g.Socket}} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s=%q: want an absolute path", p.flag, p.path)
		}
	}
	if g.HookBinary != "" && !filepath.IsAbs(g.HookBinary) {
		return fmt.Errorf("--gate-hook-binary=%q: want an absolute path", g.HookBinary)
	}
	if g.Timeout < 100*time.Millisecond || g.Timeout > 10*time.Second {
		return fmt.Errorf("--gate-timeout=%v: want 100ms to 10s (each container start of a mesh pod waits at most this long for meshlet)", g.Timeout)
	}
	return nil
}

// validateCDIVendor: with the gate, the driver name is also the CDI
// vendor, which must begin with a letter (a DNS subdomain may begin with
// a digit).
func (c Config) validateCDIVendor() error {
	if !c.Gate.Enabled || c.DriverName == "" {
		return nil
	}
	if ch := c.DriverName[0]; ch < 'a' || ch > 'z' {
		return fmt.Errorf("--dra-driver-name=%q: with --gate it is the CDI vendor of the gate's device, which must begin with a letter", c.DriverName)
	}
	return nil
}

// CDIDeviceID is the gate's fully qualified CDI device name, which
// Prepare returns for the kubelet to pass to the runtime.
func (c Config) CDIDeviceID() string { return c.DriverName + "/" + cdiClass + "=" + cdiDevice }

// cdiSpecName is the spec's file name: "<vendor>-<class>.json", as CDI
// recommends.
func (c Config) cdiSpecName() string { return c.DriverName + "-" + cdiClass + ".json" }

// The CDI spec, the fields meshlet writes.
type cdiSpec struct {
	CDIVersion string   `json:"cdiVersion"`
	Kind       string   `json:"kind"`
	Devices    []cdiDev `json:"devices"`
}

type cdiDev struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Hooks []cdiHook `json:"hooks"`
}

type cdiHook struct {
	HookName string   `json:"hookName"`
	Path     string   `json:"path"`
	Args     []string `json:"args"`
	Timeout  int      `json:"timeout"`
}

// CDISpec is the gate's CDI spec: one device whose createRuntime hook is
// meshlet-gate.
func (c Config) CDISpec() ([]byte, error) {
	g := c.Gate
	hook := cdiHook{HookName: "createRuntime", Path: filepath.Join(g.HookDir, GateBinaryName),
		Args: []string{GateBinaryName, "--socket=" + g.Socket, "--timeout=" + g.Timeout.String()},
		// The runtime's own bound, should the hook hang past its deadline.
		Timeout: int(math.Ceil(g.Timeout.Seconds())) + 2}
	spec := cdiSpec{CDIVersion: cdiVersion, Kind: c.DriverName + "/" + cdiClass,
		Devices: []cdiDev{{Name: cdiDevice, ContainerEdits: cdiEdits{Hooks: []cdiHook{hook}}}}}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// InstallGate puts meshlet-gate in the hook directory and the gate's CDI
// spec in the runtime's spec directory, each written atomically and only
// if it differs: the runtime never reads half a spec or runs half a
// binary. Two meshlets of one version (an update) write the same files.
func (c Config) InstallGate() error {
	g := c.Gate
	src := g.HookBinary
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--gate-hook-binary: locating meshlet's executable: %w", err)
		}
		src = filepath.Join(filepath.Dir(exe), GateBinaryName)
	}
	bin, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("--gate-hook-binary=%q: the meshlet-gate binary to install: %w", src, err)
	}
	if err := writeIfChanged(g.HookDir, GateBinaryName, bin, 0o755); err != nil {
		return fmt.Errorf("--gate-hook-dir: %w", err)
	}
	if err := checkHookRuns(filepath.Join(g.HookDir, GateBinaryName)); err != nil {
		return fmt.Errorf("--gate-hook-dir: %w", err)
	}
	spec, err := c.CDISpec()
	if err != nil {
		return err
	}
	if err := writeIfChanged(g.CDISpecDir, c.cdiSpecName(), spec, 0o644); err != nil {
		return fmt.Errorf("--cdi-spec-dir: %w", err)
	}
	return nil
}

// RemoveGate takes the gate's CDI spec and binary off the node (meshlet
// uninstalled): the spec first, so no runtime runs a hook that is gone.
func (c Config) RemoveGate() error {
	var errs []error
	for _, p := range []string{filepath.Join(c.Gate.CDISpecDir, c.cdiSpecName()), filepath.Join(c.Gate.HookDir, GateBinaryName)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkHookRuns runs the installed hook with -h, which only prints its
// usage: a directory mounted noexec, a binary for another architecture or
// a truncated copy fails here, at start-up, instead of at each container
// start.
//
// A binary just written can fail to start with ETXTBSY while a process
// forked meanwhile (by any goroutine) still holds the write descriptor it
// inherited, until that child execs: such a start is tried again.
func checkHookRuns(path string) error {
	out, err := exec.Command(path, "-h").CombinedOutput()
	for wait := 5 * time.Millisecond; errors.Is(err, syscall.ETXTBSY) && wait < 2*time.Second; wait *= 2 {
		time.Sleep(wait)
		out, err = exec.Command(path, "-h").CombinedOutput()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == gate.ExitUsage && bytes.Contains(out, []byte("-socket")) {
		return nil
	}
	return fmt.Errorf("%s does not run here (-h: %v): %q", path, err, out)
}

// writeIfChanged atomically writes dir/name (dir created 0755 if missing)
// unless it already has exactly data and perm.
func writeIfChanged(dir, name string, data []byte, perm fs.FileMode) error {
	path := filepath.Join(dir, name)
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == perm && fi.Size() == int64(len(data)) {
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
			return nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	if err := atomicfile.WriteWith(dir, name, bytes.NewReader(data), perm, atomicfile.Options{TempPrefix: tempPrefix}); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
