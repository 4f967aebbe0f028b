package netns_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

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
	if err := h.Do(func() error {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return err
		}
		inside = st.Ino
		return nil
	}); err != nil {
		t.Fatalf("Do after unmount: %v", err)
	}
	if inside != h.Inode() {
		t.Fatalf("Do ran in netns %d, want %d", inside, h.Inode())
	}
}

func TestDoNeverLeaksNamespace(t *testing.T) {
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
		if err := h.Do(func() error { return fnErr }); !errors.Is(err, fnErr) {
			t.Fatalf("Do returned %v, want fn's error", err)
		}
	}
	wg.Wait()
	if got := selfInode(t); got != origin {
		t.Fatalf("caller thread moved to netns %d", got)
	}
}

func TestDupAndClose(t *testing.T) {
	h := netnstest.Open(t)
	d, err := h.Dup()
	if err != nil {
		t.Fatal(err)
	}
	if d.Fd() == h.Fd() || d.Inode() != h.Inode() {
		t.Fatalf("Dup: fd %d inode %d, original fd %d inode %d", d.Fd(), d.Inode(), h.Fd(), h.Inode())
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := h.Do(func() error { return nil }); !errors.Is(err, netns.ErrClosed) {
		t.Fatalf("Do on closed handle = %v, want ErrClosed", err)
	}
	if _, err := netns.Identify(int(d.Fd())); err != nil {
		t.Fatalf("dup'ed fd no longer a netns after closing the original: %v", err)
	}
	_ = d.Close()
}
