package env

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshlet/meshlet/internal/buildflags"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image is the sandbox and app image the environment imports.
const Image = "meshlet.test/pause:1"

// Subnet is the pods' network, a documentation range inside the
// environment's own network namespace.
const Subnet = "203.0.113.0/24"

// Options configures an environment.
type Options struct {
	// BinDir holds containerd 2.x, ctr, containerd-shim-runc-v2 and crictl
	// (test/env/install-runtime.sh prints it).
	BinDir string
	// Runtime is the runtime the environment runs (Containerd if empty).
	Runtime Runtime
	// RuntimeBinDir holds the runtime's binaries (its installer prints
	// it); BinDir if empty.
	RuntimeBinDir string
	// Dir is the working directory (config, state, sockets, logs). Keep it
	// short: Unix socket paths are limited to 108 bytes.
	Dir string
	// RequiredPlugins, if set, configures containerd 2.x's NRI default
	// validator to refuse containers while these plugins are absent. The
	// other runtimes have no such validator: Start fails.
	RequiredPlugins []string
	// DisableNRI starts the runtime without NRI, as on a node where the
	// CNI fallback must enroll pods.
	DisableNRI bool
	// Subnet is the pods' network (Subnet if empty): each node of a
	// cluster gets its own.
	Subnet string
	// MountNamespace, if set, is a mount namespace (a path: see
	// NewMountNamespace) the runtime runs in: a second node's. Only
	// containerd 2.x.
	MountNamespace string
	// NodeDir is where the node's processes (the runtime, the kubelet,
	// pods) see Dir: in a second node's mount namespace, Dir is bound
	// over node A's directory, so that one DaemonSet's host paths name
	// each node's own files. The runtime's configuration names its paths
	// there (so do the network namespace paths it reports); the test
	// process reaches them under Dir. Empty: Dir.
	NodeDir string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// Env is a running environment.
type Env struct {
	opts      Options
	kind      *runtimeKind
	Netns     string // name under /run/netns
	Meshlet   string // meshlet binary
	CRISocket string
	NRISocket string
	runtime   *exec.Cmd
	rtExited  chan error
	// netnsShared: NetnsDir made the runtime's netns dir a shared mount.
	netnsShared bool
}

func (e *Env) path(p ...string) string { return filepath.Join(append([]string{e.opts.Dir}, p...)...) }

// nodePath is path(p...) as the node's processes see it (Options.NodeDir).
func (e *Env) nodePath(p ...string) string {
	dir := e.opts.NodeDir
	if dir == "" {
		dir = e.opts.Dir
	}
	return filepath.Join(append([]string{dir}, p...)...)
}

// The environment's files, under its Dir.
const (
	criSocket  = "cri.sock"
	nriSocket  = "nri.sock"
	cniConfDir = "cni/net.d"
	cniBinDir  = "cni/bin"
	cdiSpecDir = "cdi"
)

// envSeq tells apart the environments of one test binary, which may start
// side by side (a runtime per parallel subtest).
var envSeq atomic.Int64

// Start builds the binaries the tests need, creates the network namespace,
// writes the configuration, starts the runtime and imports the image.
func Start(opts Options) (_ *Env, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	kind, err := kindOf(opts.Runtime)
	if err != nil {
		return nil, err
	}
	if opts.Runtime == "" {
		opts.Runtime = Containerd
	}
	if opts.RuntimeBinDir == "" {
		opts.RuntimeBinDir = opts.BinDir
	}
	if (opts.MountNamespace != "" || opts.NodeDir != "") && opts.Runtime != Containerd {
		return nil, fmt.Errorf("a second node's environment (MountNamespace, NodeDir) runs only containerd 2.x, not %s", opts.Runtime)
	}
	if opts.Subnet == "" {
		opts.Subnet = Subnet
	}
	if len(opts.RequiredPlugins) > 0 && !kind.validator {
		return nil, fmt.Errorf("%s has no NRI validator to require plugins %q with", opts.Runtime, opts.RequiredPlugins)
	}
	if _, err := os.Stat(filepath.Join(opts.BinDir, "crictl")); err != nil {
		return nil, fmt.Errorf("e2e binary crictl missing in %q (run test/env/install-runtime.sh): %w", opts.BinDir, err)
	}
	for _, b := range kind.binaries {
		if _, err := os.Stat(filepath.Join(opts.RuntimeBinDir, b)); err != nil {
			return nil, fmt.Errorf("%s binary %s missing in %q (run its installer, test/env/install-*.sh): %w", opts.Runtime, b, opts.RuntimeBinDir, err)
		}
	}
	for _, b := range append([]string{"runc", "ip", "nsenter", "nft"}, kind.commands...) {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("e2e needs %s on PATH: %w", b, err)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return nil, fmt.Errorf("e2e needs the CNI plugins in /usr/lib/cni (Debian containernetworking-plugins): %w", err)
	}
	e := &Env{opts: opts, kind: kind, Netns: fmt.Sprintf("meshlet-e2e-%d-%d", os.Getpid(), envSeq.Add(1))}
	e.CRISocket = e.path(criSocket)
	e.NRISocket = e.path(nriSocket)
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	for _, d := range []string{"bin", "cni/net.d", "cni/bin", "cni/data", "logs"} {
		if err := os.MkdirAll(e.path(d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := e.build(); err != nil {
		return nil, err
	}
	if err := run("ip", "netns", "add", e.Netns); err != nil {
		return nil, err
	}
	if err := run("ip", "-n", e.Netns, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	if err := e.writeConfig(); err != nil {
		return nil, err
	}
	if err := writeImage(e.path("image.tar"), Image, e.path("bin", "pause")); err != nil {
		return nil, fmt.Errorf("build image: %w", err)
	}
	if kind.imageBefore {
		if err := kind.loadImage(e, e.path("image.tar"), Image); err != nil {
			return nil, fmt.Errorf("load image: %w", err)
		}
	}
	if err := e.startRuntime(); err != nil {
		return nil, err
	}
	if !kind.imageBefore {
		if err := kind.loadImage(e, e.path("image.tar"), Image); err != nil {
			return nil, fmt.Errorf("load image: %w", err)
		}
	}
	return e, nil
}

// BinDir is Options.BinDir (crictl, containerd 2.x).
func (e *Env) BinDir() string { return e.opts.BinDir }

// Runtime is the runtime the environment runs.
func (e *Env) Runtime() Runtime { return e.opts.Runtime }

// HasValidator reports whether the runtime's NRI can refuse containers
// while a required plugin is absent (containerd 2.x's default validator).
func (e *Env) HasValidator() bool { return e.kind.validator }

// build compiles meshlet and the pause binary from this module.
func (e *Env) build() error {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	e.Meshlet = e.path("bin", "meshlet")
	// meshlet-cni and meshlet-gate next to meshlet, where the daemon takes
	// them from. The runtime runs them, and the pause binary inside pods:
	// static, -trimpath and CGO_ENABLED=0 as hack/mkimage builds them.
	type build struct {
		out, pkg string
		flags    []string
		env      []string
	}
	trimpath, noCgo := []string{"-trimpath"}, []string{"CGO_ENABLED=0"}
	// As hack/mkimage builds it: the image test and this share the
	// compiled packages.
	daemon := build{e.Meshlet, "./cmd/meshlet", trimpath, noCgo}
	if raceDetector {
		// The daemon under the race detector, like the tests: a race in
		// it fails the run (Stop). Built with go test -race's settings,
		// it shares the packages go test compiles.
		daemon = build{e.Meshlet, "./cmd/meshlet", []string{"-race"}, nil}
	}
	builds := []build{
		daemon,
		{e.path("bin", "meshlet-cni"), "./cmd/meshlet-cni", trimpath, noCgo},
		{e.path("bin", "meshlet-gate"), "./cmd/meshlet-gate", trimpath, noCgo},
		{e.path("bin", "pause"), "./test/env/pause", trimpath, noCgo},
	}
	if e.opts.Runtime == CRIO {
		builds = append(builds, build{e.path("bin", "oomrunc"), "./test/env/oomrunc", trimpath, noCgo})
	}
	for _, b := range builds {
		// With the shipped binaries' tags, also for those meshlet does
		// not ship: they share the compiled packages.
		cmd := exec.Command("go", append(append([]string{"build", "-tags", buildflags.Tags}, b.flags...), "-o", b.out, b.pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w: %s", b.pkg, err, out)
		}
	}
	return nil
}

// raceReport is what the race detector writes to a daemon's log when it
// finds a data race.
var raceReport = []byte("WARNING: DATA RACE")

// checkRaces fails if a meshlet daemon's log under logs holds a race
// report.
func checkRaces(logs string) error {
	names, _ := filepath.Glob(filepath.Join(logs, "meshlet*.log"))
	var errs []error
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n := bytes.Count(b, raceReport); n > 0 {
			errs = append(errs, fmt.Errorf("the race detector found %d data race(s) in meshlet: %s", n, name))
		}
	}
	return errors.Join(errs...)
}

func (e *Env) writeConfig() error {
	if err := e.kind.writeConfig(e); err != nil {
		return err
	}
	// The network is named after the environment: runtimes on one machine
	// share libcni's cache (/var/lib/cni), and CRI-O, starting, deletes
	// every cached attachment of its networks that is not one of its own
	// pods (CNI GC), which under a shared name took the eth0 of the pods
	// of a containerd beside it.
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": "mle2e0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": %q}},
    {"type": "loopback"}
  ]
}
`, e.Netns, e.opts.Subnet, e.nodePath("cni/data"))
	return os.WriteFile(e.PrimaryConflist(), []byte(conflist), 0o644)
}

// CNIConfDir and CNIBinDir are the runtime's CNI directories (meshlet's
// --cni-conf-dir and --cni-bin-dir); PrimaryConflist is the pod network's
// conflist in CNIConfDir, as the environment wrote it.
func (e *Env) CNIConfDir() string      { return e.path(cniConfDir) }
func (e *Env) CNIBinDir() string       { return e.path(cniBinDir) }
func (e *Env) PrimaryConflist() string { return e.path("cni/net.d/10-meshlet-e2e.conflist") }

// CDISpecDir is the runtime's CDI spec directory, meshlet's --cdi-spec-dir.
func (e *Env) CDISpecDir() string { return e.path(cdiSpecDir) }

// GateHookDir is where meshlet copies meshlet-gate (--gate-hook-dir).
func (e *Env) GateHookDir() string { return e.path("gate") }

// GateSocket is meshlet's --gate-socket in the environment.
func (e *Env) GateSocket() string { return e.path("gate.sock") }

// CNISocket is meshlet's --cni-socket in the environment.
func (e *Env) CNISocket() string { return e.path("cni.sock") }

// NetnsDir is where the runtime bind-mounts pods' network namespaces
// (containerd: netns_mounts_under_state_dir), for a DaemonSet to mount with
// HostToContainer propagation. That needs a shared mount, which a node's
// root is (systemd makes it so) but a test machine's may not be: the
// directory is made a shared bind mount of itself.
func (e *Env) NetnsDir() (string, error) {
	dir := e.kind.netnsDir(e)
	if e.netnsShared {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind-mount %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return "", fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	e.netnsShared = true
	return dir, nil
}

// ImportImage imports an OCI archive into the runtime's image store as ref,
// as a node without a registry would (`ctr -n k8s.io images import`; CRI-O:
// skopeo copy into its containers-storage).
func (e *Env) ImportImage(tar, ref string) error { return e.kind.loadImage(e, tar, ref) }

func mustLook(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return name
	}
	return p
}

// startRuntime starts the runtime inside the environment's netns and
// waits for its CRI socket.
func (e *Env) startRuntime() error {
	logPath := e.path("logs", string(e.opts.Runtime)+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	ns := []string{"--net=" + e.NetnsPath()}
	if e.opts.MountNamespace != "" {
		ns = append(ns, "--mount="+e.opts.MountNamespace)
	}
	cmd := exec.Command("nsenter", append(ns, e.kind.argv(e)...)...)
	cmd.Env = append(os.Environ(), "PATH="+e.opts.RuntimeBinDir+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", e.opts.Runtime, err)
	}
	e.runtime = cmd
	e.rtExited = make(chan error, 1)
	go func() { e.rtExited <- cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := e.criWithin(5*time.Second, "version", func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
			_, err := c.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		}); err == nil {
			e.opts.Logf("%s ready (pid %d)", e.opts.Runtime, cmd.Process.Pid)
			return nil
		}
		select {
		case err := <-e.rtExited:
			e.runtime = nil
			return fmt.Errorf("%s exited: %v (log: %s)", e.opts.Runtime, err, logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 30s (log: %s)", e.opts.Runtime, logPath)
		}
	}
}

// StopRuntime stops the runtime (SIGTERM, then SIGKILL); pods' shims (or
// conmons) keep running, as on a real node during a runtime restart.
func (e *Env) StopRuntime() error {
	if e.runtime == nil {
		return nil
	}
	_ = syscall.Kill(e.runtime.Process.Pid, syscall.SIGTERM)
	select {
	case <-e.rtExited:
	case <-time.After(10 * time.Second):
		_ = e.runtime.Process.Kill()
		<-e.rtExited
	}
	e.runtime = nil
	return nil
}

// RestartRuntime stops and starts the runtime.
func (e *Env) RestartRuntime() error {
	if err := e.StopRuntime(); err != nil {
		return err
	}
	return e.startRuntime()
}

// Reboot is a node reboot as the runtime sees it, meshlet being already
// stopped: the runtime and every pod process killed, the pods' network
// namespaces gone, then the runtime started again, which finds its pods
// dead (not ready). Nothing is cleaned up in between, as after a power
// cut.
func (e *Env) Reboot() error {
	if e.runtime != nil {
		_ = e.runtime.Process.Kill()
		<-e.rtExited
		e.runtime = nil
	}
	killUnder(e.opts.Dir)
	unmountUnder(e.path("state"))
	unmountUnder(e.path("crio"))
	return e.startRuntime()
}

// Crictl runs crictl against the environment's runtime.
func (e *Env) Crictl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e.opts.BinDir, "crictl"),
		append([]string{"--runtime-endpoint", "unix://" + e.CRISocket, "--image-endpoint", "unix://" + e.CRISocket, "--timeout", "30s"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (e *Env) ctr(args ...string) (string, error) {
	out, err := exec.Command(e.runtimeBin("ctr"), append([]string{"--address", e.CRISocket, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// Ctr runs ctr against the environment's containerd in the CRI's
// namespace (k8s.io), so what it imports the kubelet's pods can use, and
// returns its combined output. It gives up after timeout (ctr run waits
// for its container).
func (e *Env) Ctr(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, e.runtimeBin("ctr"), append([]string{"--address", e.CRISocket, "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Exec runs a command inside the environment's network namespace (the
// "node" the pods are attached to).
func (e *Env) Exec(name string, args ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + e.NetnsPath(), name}, args...)...).CombinedOutput()
	return string(out), err
}

// NetnsPath is the environment's network namespace as a path.
func (e *Env) NetnsPath() string { return "/run/netns/" + e.Netns }

// Stop removes every pod, stops the runtime, deletes the namespace and
// unmounts what the runtime left. It runs even after a failed Start. It
// fails if a meshlet daemon's log holds a race detector's report.
func (e *Env) Stop() error {
	var errs []error
	if e.runtime != nil {
		if err := e.RemoveAllPods(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.StopRuntime(); err != nil {
		errs = append(errs, err)
	}
	// Shims of removed pods exit on their own; any left (a pod rmp could
	// not remove) are found by our private paths on their command line,
	// or, a second node's, by their mount namespace.
	killUnder(e.opts.Dir)
	if e.opts.MountNamespace != "" {
		KillInMountNamespace(e.opts.MountNamespace)
	}
	unmountUnder(e.opts.Dir)
	if e.Netns != "" {
		_ = run("ip", "netns", "del", e.Netns)
	}
	if err := checkRaces(e.path("logs")); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killUnder kills processes whose command line mentions a path under dir
// (not merely one that begins like it: another environment's).
func killUnder(dir string) {
	under := []byte(strings.TrimSuffix(dir, "/") + "/")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, under) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder lazily unmounts everything mounted below dir (netns bind
// mounts, rootfs overlays, shm), deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
