package env

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A MountNamespace is a persistent mount namespace for a second node on
// this machine. Its runtime, kubelet and pods run in it, and see, at the
// paths node A's processes use (each Overlay's Target), node B's own
// directories: the two nodes' host-network DaemonSet pods share one set of
// host paths (one template), yet each reaches its own node's sockets,
// state and kubelet.
type MountNamespace struct {
	// Path is the namespace, for nsenter --mount.
	Path     string
	dir      string
	overlays []Overlay
}

// An Overlay binds Source over Target inside the namespace, recursively
// and shared, so that mounts made below it (the runtime's network
// namespaces) reach a container that mounts Target HostToContainer.
type Overlay struct{ Target, Source string }

// NewMountNamespace creates the namespace, bound at dir/mnt, with the
// overlays in place.
func NewMountNamespace(dir string, overlays []Overlay) (_ *MountNamespace, err error) {
	m := &MountNamespace{Path: filepath.Join(dir, "mnt"), dir: dir, overlays: overlays}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mount namespace: %w", err)
	}
	// A namespace can only be bound on a private mount (on a shared one
	// the bind would propagate a reference to the namespace into itself).
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("bind %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	}()
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make %s private: %w", dir, err)
	}
	if err := m.create(); err != nil {
		return nil, err
	}
	return m, nil
}

// create makes a new namespace at Path and binds the overlays in it.
func (m *MountNamespace) create() error {
	if err := os.WriteFile(m.Path, nil, 0o644); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	if err := run("unshare", "--mount="+m.Path, "--propagation", "private", "true"); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, o := range m.overlays {
		if err := os.MkdirAll(o.Source, 0o755); err != nil {
			return fmt.Errorf("overlay source: %w", err)
		}
		if err := os.MkdirAll(o.Target, 0o755); err != nil {
			return fmt.Errorf("overlay target: %w", err)
		}
		// The copies of node A's mounts at Target go first: a runtime
		// that checks a path's propagation reads the first mount of it
		// in mountinfo, which a mount stacked on top would not be.
		fmt.Fprintf(&script, "umount -R -l %[2]s 2>/dev/null || true\nmount --rbind %[1]s %[2]s\nmount --make-rshared %[2]s\n",
			strconv.Quote(o.Source), strconv.Quote(o.Target))
	}
	if out, err := exec.Command("nsenter", "--mount="+m.Path, "sh", "-c", script.String()).CombinedOutput(); err != nil {
		return fmt.Errorf("overlays in the mount namespace: %w: %s", err, out)
	}
	return nil
}

// Recreate replaces the namespace with a new one, the overlays in place
// and nothing else mounted: a node's reboot as its mounts see it (network
// namespaces, container root filesystems and volumes gone). Every process
// in it is killed first (KillInMountNamespace): none may outlive the
// namespace's file, where nothing could find it again.
func (m *MountNamespace) Recreate() error {
	KillInMountNamespace(m.Path)
	if err := syscall.Unmount(m.Path, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("release mount namespace %s: %w", m.Path, err)
	}
	return m.create()
}

// Destroy releases the namespace; it goes once the last process in it
// exits.
func (m *MountNamespace) Destroy() error {
	errs := []error{syscall.Unmount(m.Path, syscall.MNT_DETACH)}
	errs = append(errs, syscall.Unmount(m.dir, syscall.MNT_DETACH))
	return errors.Join(errs...)
}

// KillInMountNamespace kills (SIGKILL) every process that runs in the mount
// namespace at path: a second node's runtime, its shims, its kubelet.
func KillInMountNamespace(path string) {
	var want syscall.Stat_t
	if err := syscall.Stat(path, &want); err != nil {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/mnt")
	for _, p := range procs {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || st.Ino != want.Ino || st.Dev != want.Dev {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p)))); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// PowerOff is a second node's power cut as its runtime sees it: the
// runtime and everything else in its mount namespace killed. The pods'
// processes, in namespaces of their own, are the kubelet's cgroups' to
// kill (clusterenv.Node.KillPods).
func (e *Env) PowerOff() error {
	if e.opts.MountNamespace == "" {
		return errors.New("PowerOff is for a second node's environment (Options.MountNamespace)")
	}
	if e.runtime != nil {
		_ = e.runtime.Process.Kill()
		<-e.rtExited
		e.runtime = nil
	}
	KillInMountNamespace(e.opts.MountNamespace)
	return nil
}

// PowerOn starts the runtime again (after PowerOff and a new mount
// namespace: MountNamespace.Recreate).
func (e *Env) PowerOn() error { return e.startRuntime() }
