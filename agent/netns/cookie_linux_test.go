package netns_test

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestCookieTellsRecycledInodesApart: the kernel hands a freed namespace's
// inode to a later one, so an inode alone cannot say whether a namespace
// is the one recorded; their cookies differ. Namespaces are made and
// dropped until an inode comes back (the kernel frees a namespace in the
// background, within milliseconds here). An address dump reads the cookie
// on the way and keeps it.
func TestCookieTellsRecycledInodesApart(t *testing.T) {
	privtest.RequireRoot(t)
	dir := t.TempDir()
	cookies := map[uint64]uint64{} // inode → cookie of the first namespace that had it
	seen := map[uint64]bool{}      // cookies
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		path := filepath.Join(dir, fmt.Sprint(i))
		if err := netnstest.Create(path); err != nil {
			t.Fatal(err)
		}
		h, err := netns.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if _, err := h.PodAddrs(); err == nil {
				t.Fatal("PodAddrs found an eth0 in an empty namespace")
			}
			// The dump kept the cookie: no read follows.
			restore := netns.SetThreadCookie(func() (uint64, error) { return 0, errors.New("read again") })
			c, err := h.Cookie()
			restore()
			if err != nil || c == 0 {
				t.Fatalf("Cookie() after an address dump = %d, %v; want the cookie the dump read", c, err)
			}
		}
		c, err := h.Cookie()
		if err != nil || c == 0 {
			t.Fatalf("Cookie() = %d, %v; want a cookie", c, err)
		}
		if again, _ := h.Cookie(); again != c {
			t.Fatalf("Cookie() changed from %d to %d", c, again)
		}
		_ = h.Close()
		if err := netnstest.Destroy(path); err != nil {
			t.Fatal(err)
		}
		if seen[c] {
			t.Fatalf("cookie %d given to a second namespace", c)
		}
		seen[c] = true
		if first, ok := cookies[h.Inode()]; ok {
			t.Logf("inode %d recycled after %d namespaces: cookies %d and %d", h.Inode(), i, first, c)
			return
		}
		cookies[h.Inode()] = c
		if time.Now().After(deadline) {
			t.Fatalf("no inode recycled in %d namespaces (%v): the kernel fact this test shows did not occur", i+1, cookies)
		}
		time.Sleep(20 * time.Millisecond) // the kernel frees a namespace in its cleanup work
	}
}

// TestKernelWithoutCookies: before Linux 5.14 there are no cookies; a
// namespace's addresses are read all the same, and Cookie says why it has
// none (the core then names the namespace by sandbox and inode).
func TestKernelWithoutCookies(t *testing.T) {
	privtest.RequireRoot(t)
	ip := netip.MustParseAddr("10.77.0.9")
	path := netnstest.NewWithAddrs(t, ip)
	defer netns.SetThreadCookie(func() (uint64, error) {
		return 0, errors.New("getsockopt SO_NETNS_COOKIE (Linux ≥ 5.14): protocol not available")
	})()
	h, err := netns.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.HoldsAddrs([]netip.Addr{ip}); err != nil {
		t.Fatalf("HoldsAddrs on a kernel without cookies: %v", err)
	}
	if got, err := h.PodAddrs(); err != nil || len(got) != 1 || got[0] != ip {
		t.Fatalf("PodAddrs on a kernel without cookies = %v, %v; want [%s]", got, err, ip)
	}
	if c, err := h.Cookie(); err == nil || c != 0 || !strings.Contains(err.Error(), "SO_NETNS_COOKIE") {
		t.Fatalf("Cookie() = %d, %v; want an error naming SO_NETNS_COOKIE", c, err)
	}
}

// BenchmarkCookie: what reading a namespace's cookie costs on its own
// (entering the namespace on a locked thread, a socket, getsockopt), as
// an adoption reads it, against opening the namespace; an enrollment
// reads it during its address dump instead, at no extra switch.
func BenchmarkCookie(b *testing.B) {
	path := netnstest.New(b)
	for _, withCookie := range []bool{false, true} {
		name := "open"
		if withCookie {
			name = "open+cookie"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				h, err := netns.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if withCookie {
					if _, err := h.Cookie(); err != nil {
						b.Fatal(err)
					}
				}
				_ = h.Close()
			}
		})
	}
}
