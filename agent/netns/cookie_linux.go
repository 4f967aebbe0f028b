package netns

import (
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Cookie returns the namespace's cookie: a number the kernel gives each
// network namespace when it creates it and never gives another in the
// same boot (SO_NETNS_COOKIE, Linux ≥ 5.14), where inode numbers are
// reused as soon as a namespace is freed. It is read once, through a
// socket made in the namespace on RunIn's thread, and kept; an address
// dump (HoldsAddrs, PodAddrs) reads it on the way, at no extra switch.
// On an older kernel it is an error, and the dump goes on without it.
func (h *Handle) Cookie() (uint64, error) {
	if c := h.cookie.Load(); c != 0 {
		return c, nil
	}
	if err := errNoCookies.Load(); err != nil {
		return 0, fmt.Errorf("netns %s (inode %d): cookie: %w", h.path, h.inode, *err)
	}
	err := h.WithFd(func(fd int) error {
		return RunIn(fd, func() error { return h.readCookie() })
	})
	if err != nil {
		return 0, fmt.Errorf("netns %s (inode %d): cookie: %w", h.path, h.inode, err)
	}
	return h.cookie.Load(), nil
}

// readCookie stores the cookie of the calling thread's network namespace.
// It runs inside RunIn.
func (h *Handle) readCookie() error {
	if h.cookie.Load() != 0 {
		return nil
	}
	c, err := threadCookie()
	if err != nil {
		return err
	}
	h.cookie.Store(c)
	return nil
}

// errNoCookies is what a kernel without SO_NETNS_COOKIE (before Linux
// 5.14) answers, remembered so that no later read pays a socket for it.
var errNoCookies atomic.Pointer[error]

// threadCookie is the cookie of the calling thread's network namespace. A
// variable so that a test can stand in for a kernel without cookies.
var threadCookie = func() (uint64, error) {
	if err := errNoCookies.Load(); err != nil {
		return 0, *err
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(s)
	c, err := unix.GetsockoptUint64(s, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		err = fmt.Errorf("getsockopt SO_NETNS_COOKIE (Linux ≥ 5.14): %w", err)
		if errors.Is(err, unix.ENOPROTOOPT) {
			errNoCookies.Store(&err)
		}
		return 0, err
	}
	return c, nil
}
