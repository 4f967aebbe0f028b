package netnstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
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
// created there). It works on a dedicated locked thread, so no goroutine of
// the caller ever runs in the new namespace.
func Create(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	_ = f.Close()
	errc := make(chan error, 1)
	// Everything, including closing the origin fd, happens before the
	// result is sent: the caller must not see a transient namespace fd.
	go func() { errc <- createLocked(path) }()
	if err := <-errc; err != nil {
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

// createLocked runs on its own goroutine; the thread is discarded if it
// cannot return to its original namespace.
func createLocked(path string) error {
	runtime.LockOSThread()
	origin, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer unix.Close(origin)
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("unshare: %w", err)
	}
	mountErr := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
	if err := unix.Setns(origin, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime discards it.
		return fmt.Errorf("return to origin netns: %w", err)
	}
	runtime.UnlockOSThread()
	if mountErr != nil {
		return fmt.Errorf("bind mount netns at %s: %w", path, mountErr)
	}
	return nil
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
	err = h.Do(func() error {
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
	err = h.Do(func() error {
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
