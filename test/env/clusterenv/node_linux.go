package clusterenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// NodeOptions configures a second node of the cluster: a kubelet of its
// own, with its own runtime, in the node's network and mount namespaces,
// against the cluster's control plane.
type NodeOptions struct {
	// Name is the node's name.
	Name string
	// NetnsPath is the node's network namespace: its runtime's
	// (env.Env.NetnsPath).
	NetnsPath string
	// MountNamespace is the node's mount namespace (env.MountNamespace's
	// Path). In it, the cluster's KubeletRootDir and the kubelet's fixed
	// paths (/var/lib/kubelet, /var/log/pods, /var/log/containers) must be
	// the node's own directories.
	MountNamespace string
	// CRISocket is the node's runtime's socket.
	CRISocket string
	// IP is the node's address, put on its namespace's loopback.
	IP string
	// RegisterWithTaints are the kubelet's --register-with-taints
	// (key[=value]:effect), set on the Node when it registers.
	RegisterWithTaints []string
	// RemoveSandboxes removes every pod sandbox from the node's runtime
	// (see Options.RemoveSandboxes).
	RemoveSandboxes func() error
}

// Node is a second node of the cluster.
type Node struct {
	c    *Cluster
	opts NodeOptions
	dir  string
	// cgroupRoot is the kubelet's cgroupRoot: the node's pods' cgroups are
	// below it in every hierarchy, apart from the first node's.
	cgroupRoot string
	kubelet    *proc
	apiProxy   net.Listener
	proxied    sync.WaitGroup
	undo       []func() error
}

// AddNode starts a second node's kubelet and returns once the node is
// Ready (tainted or not: a node may register with taints). The API server
// listens on the first node's loopback: the node gets a forwarder on its
// own, so that its kubelet and its host-network pods reach it there.
func (c *Cluster) AddNode(opts NodeOptions) (_ *Node, err error) {
	// The test process's pid: the cgroup root is this test's alone.
	n := &Node{c: c, opts: opts, dir: c.path("node-" + opts.Name), cgroupRoot: fmt.Sprintf("/meshlet-%s-%d", opts.Name, os.Getpid())}
	defer func() {
		if err != nil {
			_ = n.stop()
		}
	}()
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, fmt.Errorf("node %s: %w", opts.Name, err)
	}
	ns := filepath.Base(opts.NetnsPath)
	if out, err := exec.Command("ip", "-n", ns, "addr", "replace", opts.IP+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("node %s address: %w: %s", opts.Name, err, out)
	}
	if err := n.proxyAPI(); err != nil {
		return nil, err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "kubelet.yaml"), []byte(c.kubeletConfig(opts.CRISocket, opts.IP, n.cgroupRoot)), 0o644); err != nil {
		return nil, fmt.Errorf("node %s: %w", opts.Name, err)
	}
	if err := n.StartKubelet(); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.opts.Name }

// proxyAPI forwards the node's 127.0.0.1:<API port> to the API server.
func (n *Node) proxyAPI() error {
	u, err := url.Parse(n.c.Kube.Config().Host)
	if err != nil {
		return fmt.Errorf("the API server's address: %w", err)
	}
	l, err := netnstest.Listen(n.opts.NetnsPath, "tcp", "127.0.0.1:"+u.Port())
	if err != nil {
		return fmt.Errorf("node %s: the API server's forwarder: %w", n.opts.Name, err)
	}
	n.apiProxy = l
	n.proxied.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			n.proxied.Go(func() {
				defer conn.Close()
				up, err := n.c.Kube.Dial(context.Background(), "tcp", u.Host)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
				<-done
			})
		}
	})
	n.undo = append(n.undo, func() error {
		l.Close()
		// Connections end with their peers: the kubelet and meshlet are
		// gone by now.
		n.proxied.Wait()
		return nil
	})
	return nil
}

// makeCgroupRoot creates the node's cgroup root in every hierarchy (the
// kubelet expects it), cpuset's with its parent's CPUs and memory nodes.
// Only cgroup v1 hierarchies (the cgroupfs driver, as on the machines the
// tests run on): under the unified hierarchy every directory of
// /sys/fs/cgroup is a cgroup, not a hierarchy.
func (n *Node) makeCgroupRoot() error {
	var fs unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &fs); err != nil {
		return fmt.Errorf("node %s: /sys/fs/cgroup: %w", n.opts.Name, err)
	}
	if fs.Type == unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("node %s: a second node needs cgroup v1 hierarchies, and /sys/fs/cgroup is the unified (v2) hierarchy", n.opts.Name)
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if fi, err := os.Lstat(h); err != nil || !fi.IsDir() {
			continue // a symlink (cpu -> cpu,cpuacct): made through its target
		}
		var hfs unix.Statfs_t
		if err := unix.Statfs(h, &hfs); err != nil || hfs.Type != unix.CGROUP_SUPER_MAGIC {
			continue // not a v1 hierarchy (the unified one beside them)
		}
		dir := h + n.cgroupRoot
		// Refused when it exists: KillPods and the teardown would take
		// whatever runs in it.
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("node %s cgroup %s: %w", n.opts.Name, dir, err)
		}
		n.undo = append(n.undo, func() error { return removeCgroup(dir) })
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("node %s %s: %w", n.opts.Name, f, err)
				}
			}
		}
	}
	return nil
}

// StartKubelet starts the node's kubelet (again, after StopKubelet).
func (n *Node) StartKubelet() error {
	kubeconfig, err := n.c.Kube.Kubeconfig()
	if err != nil {
		return err
	}
	args := append(n.c.opts.featureGates(), "--config", filepath.Join(n.dir, "kubelet.yaml"), "--kubeconfig", kubeconfig,
		"--hostname-override", n.opts.Name, "--node-ip", n.opts.IP, "--root-dir", n.c.KubeletRootDir(), "--cert-dir", filepath.Join(n.dir, "pki"))
	if len(n.opts.RegisterWithTaints) > 0 {
		args = append(args, "--register-with-taints="+strings.Join(n.opts.RegisterWithTaints, ","))
	}
	args = append(args, n.c.kubeletFlags()...)
	p, err := n.c.startIn("kubelet", filepath.Join(n.dir, "kubelet.log"),
		[]string{"--net=" + n.opts.NetnsPath, "--mount=" + n.opts.MountNamespace}, args...)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.opts.Name, err)
	}
	n.kubelet = p
	return nil
}

// KubeletLog is the node's kubelet's log file.
func (n *Node) KubeletLog() string { return filepath.Join(n.dir, "kubelet.log") }

// StopKubelet kills the node's kubelet, as a power cut does; its pods keep
// running until they are killed too (KillPods).
func (n *Node) StopKubelet() {
	if n.kubelet == nil {
		return
	}
	_ = n.kubelet.cmd.Process.Kill()
	<-n.kubelet.done
	n.kubelet = nil
}

// KillPods kills (SIGKILL) every process of the node's pods: everything in
// its cgroup root.
func (n *Node) KillPods() {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*" + n.cgroupRoot)
	for _, h := range hierarchies {
		_ = filepath.WalkDir(h, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// WaitReady waits until the node is Ready, whatever its taints.
func (n *Node) WaitReady(ctx context.Context) error {
	var last string
	for {
		if n.kubelet != nil {
			select {
			case err := <-n.kubelet.done:
				n.kubelet.done <- err
				return fmt.Errorf("node %s: kubelet exited: %v (log %s)", n.opts.Name, err, n.KubeletLog())
			default:
			}
		}
		node, err := n.c.Client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case !nodeReady(node):
			last = "node not Ready"
		default:
			n.c.opts.Logf("node %s ready, taints %v", n.opts.Name, node.Spec.Taints)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready: %s (kubelet log %s)", n.opts.Name, last, n.KubeletLog())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop stops the node's kubelet, removes its runtime's sandboxes and
// undoes what AddNode made.
func (n *Node) stop() error {
	var errs []error
	if n.kubelet != nil {
		n.kubelet.stop()
		n.kubelet = nil
	}
	if n.opts.RemoveSandboxes != nil {
		errs = append(errs, n.opts.RemoveSandboxes())
	}
	n.KillPods()
	for _, u := range slices.Backward(n.undo) {
		errs = append(errs, u())
	}
	n.undo = nil
	return errors.Join(errs...)
}
