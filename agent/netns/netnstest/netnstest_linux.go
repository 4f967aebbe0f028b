package netnstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/internal/privtest"
)

// New creates a new, empty network namespace and returns its bind-mount
// path. The mount is removed when the test ends; the namespace itself goes
// away once nothing holds it.
func New(t testing.TB) string {
	t.Helper()
	privtest.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "netns")
	if err := Create(path); err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		if err := Destroy(path); err != nil {
			t.Errorf("destroy netns %s: %v", path, err)
		}
	})
	return path
}

// Open creates a namespace like New and returns an open handle to it,
// closed when the test ends.
func Open(t testing.TB) *netns.Handle {
	t.Helper()
	h, err := netns.Open(New(t))
	if err != nil {
		t.Fatalf("open netns: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// Create makes a new network namespace bind-mounted at path (a file is
// created there). The namespace is made on a thread of netns.RunIn's, which
// returns that thread to the process's namespace afterwards, so no
// goroutine of the caller ever runs in the new namespace.
func Create(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	_ = f.Close()
	self, err := os.Open("/proc/self/ns/net")
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("open the process's netns: %w", err)
	}
	defer self.Close()
	err = netns.RunIn(int(self.Fd()), func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount netns at %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// Destroy unmounts a namespace made by Create and removes its mount point.
func Destroy(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return fmt.Errorf("unmount: %w", err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// Run runs fn inside the namespace h holds (netns.RunIn on its fd).
func Run(h *netns.Handle, fn func() error) error {
	return h.WithFd(func(fd int) error { return netns.RunIn(fd, fn) })
}

// Fd returns h's descriptor for APIs that take one (netlink handles, a
// redirector's node namespace). It stays valid while h is open: tests
// close their handles at cleanup, after everything that uses it.
func Fd(t testing.TB, h *netns.Handle) int {
	t.Helper()
	fd := -1
	if err := h.WithFd(func(d int) error { fd = d; return nil }); err != nil {
		t.Fatalf("netns %s: %v", h, err)
	}
	return fd
}

// HeldNetns returns, for the process pid (0: this process), how many open
// fds it holds on each network namespace, by inode. Tests use it to prove
// a namespace is held exactly as long as it should be; counting all fds
// would be flaky (sockets and epoll fds come and go with background work).
func HeldNetns(pid int) (map[uint64]int, error) {
	dir := "/proc/self/fd"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/fd", pid)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	held := map[uint64]int{}
	for _, e := range ents {
		// Reopening through /proc works for another process's fds too;
		// sockets refuse it and are skipped.
		fd, err := unix.Open(dir+"/"+e.Name(), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if ino, err := netns.Identify(fd); err == nil {
			held[ino]++
		}
		_ = unix.Close(fd)
	}
	return held, nil
}

// Dial connects from inside the network namespace at nsPath: the socket is
// created there (it keeps that namespace), on a locked thread of its own.
// Usable as an http.Transport's or rest.Config's dial function.
func Dial(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	h, err := netns.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var c net.Conn
	err = Run(h, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a listener inside the network namespace at nsPath.
func Listen(nsPath, network, addr string) (net.Listener, error) {
	h, err := netns.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var l net.Listener
	err = Run(h, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Accept waits up to wait for one connection on l; on timeout it closes l
// (to unblock Accept) and says so.
func Accept(l net.Listener, wait time.Duration) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-time.After(wait):
		l.Close()
		return nil, fmt.Errorf("no connection on %s within %v", l.Addr(), wait)
	}
}
