package netns_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

func selfInode(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestOpenReportsInode(t *testing.T) {
	path := netnstest.New(t)
	h, err := netns.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if h.Inode() != st.Ino {
		t.Fatalf("Inode() = %d, want %d", h.Inode(), st.Ino)
	}
	if h.Inode() == selfInode(t) {
		t.Fatalf("new netns has the same inode as the test's own netns")
	}
}

// TestOpenRefusesNonNetns needs no root: nothing is created.
func TestOpenRefusesNonNetns(t *testing.T) {
	regular := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Open(regular); !errors.Is(err, netns.ErrNotNetns) {
		t.Fatalf("Open(regular file) = %v, want ErrNotNetns", err)
	}
	if _, err := netns.Open("/proc/self/ns/mnt"); !errors.Is(err, netns.ErrNotNetns) {
		t.Fatalf("Open(mount namespace) = %v, want ErrNotNetns", err)
	}
	if _, err := netns.Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open(missing) = %v, want ErrNotExist", err)
	}
}

func TestHandleOutlivesMount(t *testing.T) {
	privtest.RequireRoot(t) // it creates the namespace itself, not through netnstest.New
	path := filepath.Join(t.TempDir(), "ns")
	if err := netnstest.Create(path); err != nil {
		t.Fatal(err)
	}
	h, err := netns.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := netnstest.Destroy(path); err != nil {
		t.Fatal(err)
	}
	var inside uint64
	if err := netnstest.Run(h, func() error {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return err
		}
		inside = st.Ino
		return nil
	}); err != nil {
		t.Fatalf("RunIn after unmount: %v", err)
	}
	if inside != h.Inode() {
		t.Fatalf("RunIn ran in netns %d, want %d", inside, h.Inode())
	}
}

// TestRunInNeverLeaksNamespace: neither the caller's thread nor any thread
// handed back to the scheduler stays in the target namespace, even when fn
// moves its thread into yet another one (unshare).
func TestRunInNeverLeaksNamespace(t *testing.T) {
	h := netnstest.Open(t)
	origin := selfInode(t)
	fnErr := errors.New("from fn")
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var st unix.Stat_t
			if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil || st.Ino != origin {
				t.Errorf("goroutine thread in netns %d (err %v), want origin %d", st.Ino, err, origin)
			}
		}()
		if err := netnstest.Run(h, func() error { return fnErr }); !errors.Is(err, fnErr) {
			t.Fatalf("RunIn returned %v, want fn's error", err)
		}
		if err := netnstest.Run(h, func() error { return unix.Unshare(unix.CLONE_NEWNET) }); err != nil {
			t.Fatalf("RunIn with an unsharing fn: %v", err)
		}
	}
	wg.Wait()
	if got := selfInode(t); got != origin {
		t.Fatalf("caller thread moved to netns %d", got)
	}
}

// TestWithFdAndClose: WithFd lends a live netns descriptor; Close waits
// for a WithFd in progress, then WithFd refuses without calling fn.
func TestWithFdAndClose(t *testing.T) {
	h := netnstest.Open(t)
	inside, release := make(chan struct{}), make(chan struct{})
	lent := make(chan error, 1)
	go func() {
		lent <- h.WithFd(func(fd int) error {
			close(inside)
			<-release
			ino, err := netns.Identify(fd)
			if err == nil && ino != h.Inode() {
				err = fmt.Errorf("lent fd is netns %d, want %d", ino, h.Inode())
			}
			return err
		})
	}()
	<-inside
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the descriptor was lent", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-lent; err != nil {
		t.Fatalf("WithFd: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	called := false
	if err := h.WithFd(func(int) error { called = true; return nil }); !errors.Is(err, netns.ErrClosed) || called {
		t.Fatalf("WithFd on closed handle = %v (fn called: %t), want ErrClosed without fn", err, called)
	}
}
