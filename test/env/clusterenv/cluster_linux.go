package clusterenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// BinEnv names the variable holding the directory test/env/install-cluster.sh
// prints.
const BinEnv = "MESHLET_CLUSTER_BIN"

// Options configures a cluster.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubelet (test/env/install-cluster.sh prints it).
	BinDir string
	// Dir is the working directory (keep it short: socket paths).
	Dir string
	// NetnsPath is the network namespace every component runs in: the
	// runtime's (env.Env.NetnsPath).
	NetnsPath string
	// CRISocket is the runtime's CRI socket.
	CRISocket string
	// NodeName is the kubelet's node.
	NodeName string
	// RemoveSandboxes removes every pod sandbox from the runtime. Stop
	// calls it once the kubelet is gone: a deleted pod's sandbox lingers
	// until the kubelet's garbage collection, and its cgroups cannot be
	// removed while it does.
	RemoveSandboxes func() error
	// APIServerArgs are more kube-apiserver flags (e.g. an admission
	// configuration of a managed cluster's kind).
	APIServerArgs []string
	// FeatureGates are set on every component (e.g. DRAConsumableCapacity
	// off, as on clusters of 1.34 and 1.35).
	FeatureGates map[string]bool
	// MaxContainerRestartPeriod, if set, caps the kubelet's back-off
	// between tries to start a failing container (the kubelet's
	// KubeletCrashLoopBackOffMax feature), for tests that wait for a
	// container refused at start to be tried again.
	MaxContainerRestartPeriod time.Duration
	// KeepNoDeadContainers has the kubelet's garbage collection remove
	// every exited container (it keeps one per container otherwise), so
	// that a replaced sandbox, left without containers, is removed at its
	// next pass (every minute), as on a node under disk pressure.
	KeepNoDeadContainers bool
	Logf                 func(format string, args ...any)
}

// featureGates is Options.FeatureGates as a --feature-gates value.
func (o *Options) featureGates() []string {
	if len(o.FeatureGates) == 0 {
		return nil
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(o.FeatureGates)) {
		kv = append(kv, fmt.Sprintf("%s=%t", k, o.FeatureGates[k]))
	}
	return []string{"--feature-gates=" + strings.Join(kv, ",")}
}

// Cluster is a running single-node cluster.
type Cluster struct {
	opts Options
	// Kube is the control plane's etcd and kube-apiserver.
	Kube   *kubeenv.Env
	Client kubernetes.Interface
	procs  []*proc // in start order; stopped in reverse
	// nodes are the nodes added to the first (AddNode), stopped first.
	nodes []*Node
	undo  []func() error
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

// kubelet's changes to the machine that Stop undoes (it rewrites these
// with protectKernelDefaults off, which it needs without
// CAP_SYS_RESOURCE).
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// kubeletFixedDirs are paths the kubelet uses whatever its root dir.
var kubeletFixedDirs = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods"}

// lockMachine waits for, then holds until release, the machine's one
// cluster: a kubelet changes machine-wide state (sysctls, the kubepods
// cgroups, /var/lib/kubelet) that a second one would fight over, and each
// cluster's Stop puts back. Tests of several packages (the end-to-end
// tests, the demos') start clusters while go test runs them side by side.
func lockMachine(logf func(string, ...any)) (release func() error, err error) {
	name := filepath.Join(os.TempDir(), "meshlet-test-cluster.lock")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cluster lock: %w", err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		logf("waiting for another test's cluster on this machine to stop (%s)", name)
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cluster lock %s: %w", name, err)
	}
	return f.Close, nil // closing the file releases the lock
}

// Start starts the control plane, then the kubelet, and returns once the
// node is Ready and schedulable and the default namespace's service
// account exists. On error everything started is stopped.
func Start(opts Options) (_ *Cluster, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	for _, b := range []string{"kube-controller-manager", "kube-scheduler", "kubelet"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s missing in %q (run test/env/install-cluster.sh): %w", b, opts.BinDir, err)
		}
	}
	release, err := lockMachine(opts.Logf)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, undo: []func() error{release}}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	c.saveMachineState()
	if err := c.addNodeAddress(); err != nil {
		return nil, err
	}
	kubeDir := c.path("kube")
	if err := os.MkdirAll(kubeDir, 0o755); err != nil {
		return nil, err
	}
	// The API server reaches a kubelet (exec, logs, port-forward) at its
	// node's InternalIP: the node's name resolves nowhere here.
	apiserverArgs := append(opts.featureGates(), "--kubelet-preferred-address-types=InternalIP")
	if c.Kube, err = kubeenv.StartIn(opts.BinDir, kubeDir, opts.NetnsPath, append(apiserverArgs, opts.APIServerArgs...)...); err != nil {
		return nil, err
	}
	c.undo = append(c.undo, func() error { c.Kube.Stop(); return nil })
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Kube.Config()); err != nil {
		return nil, err
	}
	if err := c.start("kube-controller-manager", append(opts.featureGates(), "--kubeconfig", kubeconfig,
		// All controllers: without node-lifecycle the node's not-ready
		// taint is never removed.
		"--controllers=*", "--leader-elect=false", "--bind-address=127.0.0.1",
		"--service-account-private-key-file", filepath.Join(kubeDir, "sa.key"),
		"--root-ca-file", filepath.Join(kubeDir, "certs", "apiserver.crt"),
		"--use-service-account-credentials=false")...); err != nil {
		return nil, err
	}
	if err := c.start("kube-scheduler", append(opts.featureGates(), "--kubeconfig", kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1")...); err != nil {
		return nil, err
	}
	if err := c.startKubelet(kubeconfig); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// KubeletRootDir is the kubelet's --root-dir: a DRA plugin registers in its
// plugins_registry.
func (c *Cluster) KubeletRootDir() string { return c.path("kubelet") }

func (c *Cluster) path(p ...string) string {
	return filepath.Join(append([]string{c.opts.Dir}, p...)...)
}

// saveMachineState records what the kubelet will change so that Stop can
// put it back: sysctls, fixed directories that did not exist, cgroups.
func (c *Cluster) saveMachineState() {
	for _, s := range kubeletSysctls {
		p := "/proc/sys/" + s
		if v, err := os.ReadFile(p); err == nil {
			c.undo = append(c.undo, func() error { return os.WriteFile(p, v, 0o644) })
		}
	}
	for _, d := range kubeletFixedDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			c.undo = append(c.undo, func() error { return os.RemoveAll(d) })
		}
	}
	existing := map[string]bool{}
	kubepods, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	more, _ := filepath.Glob("/sys/fs/cgroup/kubepods*")
	for _, p := range append(kubepods, more...) {
		existing[p] = true
	}
	c.undo = append(c.undo, func() error {
		a, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
		b, _ := filepath.Glob("/sys/fs/cgroup/kubepods*")
		var errs []error
		for _, p := range append(a, b...) {
			if !existing[p] {
				errs = append(errs, removeCgroup(p))
			}
		}
		return errors.Join(errs...)
	})
}

// removeCgroup removes a cgroup directory tree, deepest first (cgroupfs
// refuses to remove a directory that has children; files go with it).
func removeCgroup(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // gone
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// NodeIP is the node's address inside the namespace: the kubelet needs
// one that is not loopback, and the namespace has no other of its own. A
// documentation address, on the namespace's lo (it goes with the
// namespace).
const NodeIP = "192.0.2.100"

func (c *Cluster) addNodeAddress() error {
	ns := filepath.Base(c.opts.NetnsPath)
	out, err := exec.Command("ip", "-n", ns, "addr", "replace", NodeIP+"/32", "dev", "lo").CombinedOutput()
	if err != nil {
		return fmt.Errorf("node address: %w: %s", err, out)
	}
	return nil
}

func (c *Cluster) startKubelet(kubeconfig string) error {
	root := c.KubeletRootDir()
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	cfg := c.kubeletConfig(c.opts.CRISocket, NodeIP, "")
	cfgPath := c.path("kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	// The kubelet makes its root dir a shared bind mount; unmount it and
	// everything under it when it is gone.
	c.undo = append(c.undo, func() error {
		_ = exec.Command("umount", "-R", "-l", root).Run()
		return nil
	})
	args := append(c.opts.featureGates(), "--config", cfgPath, "--kubeconfig", kubeconfig,
		"--hostname-override", c.opts.NodeName, "--node-ip", NodeIP, "--root-dir", root, "--cert-dir", c.path("kubelet-pki"))
	args = append(args, c.kubeletFlags()...)
	return c.start("kubelet", args...)
}

// kubeletConfig is a kubelet's configuration: the runtime at criSocket,
// its API (exec, logs) served on the node's address ip, where the API
// server dials it, pods' cgroups under cgroupRoot ("": the machine's
// root).
func (c *Cluster) kubeletConfig(criSocket, ip, cgroupRoot string) string {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://%s
staticPodPath: ""
address: %s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, criSocket, ip)
	if d := c.opts.MaxContainerRestartPeriod; d > 0 {
		cfg += fmt.Sprintf("featureGates: {KubeletCrashLoopBackOffMax: true}\ncrashLoopBackOff: {maxContainerRestartPeriod: %s}\n", d)
	}
	if cgroupRoot != "" {
		cfg += fmt.Sprintf("cgroupRoot: %s\ncgroupsPerQOS: true\n", cgroupRoot)
	}
	return cfg
}

// kubeletFlags are the kubelet flags of Options every node's kubelet gets.
func (c *Cluster) kubeletFlags() []string {
	if c.opts.KeepNoDeadContainers {
		// Deprecated, and the only way: KubeletConfiguration has no field.
		return []string{"--maximum-dead-containers-per-container=0"}
	}
	return nil
}

// start runs a component inside the namespace, logging to Dir/<name>.log.
func (c *Cluster) start(name string, args ...string) error {
	p, err := c.startIn(name, c.path(name+".log"), []string{"--net=" + c.opts.NetnsPath}, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// startIn runs the binary name in the namespaces nsenter's flags ns name,
// logging to logPath.
func (c *Cluster) startIn(name, logPath string, ns []string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("nsenter", append(append(ns, filepath.Join(c.opts.BinDir, name)), args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); logf.Close() }()
	c.opts.Logf("%s started (pid %d)", name, cmd.Process.Pid)
	return p, nil
}

// stop stops a component: SIGTERM, then SIGKILL after 15 s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitReady waits for the node to be Ready without the not-ready taint,
// and for the default service account, which pods need to be admitted.
func (c *Cluster) waitReady(ctx context.Context) error {
	var last string
	for {
		if err := c.exited(); err != nil {
			return err
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case !nodeReady(node):
			last = "node not Ready"
		case len(node.Spec.Taints) > 0:
			last = fmt.Sprintf("node tainted %v", node.Spec.Taints)
		default:
			_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			if err == nil {
				c.opts.Logf("cluster ready: node %s", c.opts.NodeName)
				return nil
			}
			last = "no default service account: " + err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %s (logs in %s)", last, c.opts.Dir)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exited reports a component that is no longer running.
func (c *Cluster) exited() error {
	for _, p := range c.procs {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited: %v (log %s)", p.name, err, c.path(p.name+".log"))
		default:
		}
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Stop deletes every pod (so the kubelet tears them down and any DRA
// Unprepare runs), stops the components in reverse order and undoes the
// kubelet's changes to the machine. Errors are joined; every step runs.
func (c *Cluster) Stop() error {
	var errs []error
	if c.Client != nil && c.exited() == nil {
		errs = append(errs, c.DeletePods())
	}
	for i := len(c.nodes) - 1; i >= 0; i-- {
		errs = append(errs, c.nodes[i].stop())
	}
	c.nodes = nil
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	c.procs = nil
	if c.opts.RemoveSandboxes != nil {
		errs = append(errs, c.opts.RemoveSandboxes())
	}
	for i := len(c.undo) - 1; i >= 0; i-- {
		errs = append(errs, c.undo[i]())
	}
	c.undo = nil
	return errors.Join(errs...)
}

// DeletePods deletes every pod and waits (bounded) until the kubelet has
// removed them. Call it before stopping a DRA plugin: the kubelet
// unprepares a pod's claims only while their plugin runs.
func (c *Cluster) DeletePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods := c.Client.CoreV1().Pods(metav1.NamespaceAll)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for _, p := range list.Items {
		_ = c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
	}
	for {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var names []string
			if list != nil {
				for _, p := range list.Items {
					names = append(names, p.Namespace+"/"+p.Name)
				}
			}
			return fmt.Errorf("pods not removed by the kubelet: %s", strings.Join(names, ", "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
