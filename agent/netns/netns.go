package netns

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrNotNetns is returned when a path exists but is not a network namespace.
var ErrNotNetns = errors.New("not a network namespace")

// ErrAddrsMissing is returned when a namespace does not hold addresses it
// should: the runtime's network namespace for a pod is not the one its IPs
// were set up in.
var ErrAddrsMissing = errors.New("the pod's IPs are not on any of its interfaces")

// ErrClosed is returned by operations on a closed Handle.
var ErrClosed = errors.New("netns handle closed")

// Handle is an open network namespace. The zero value is not usable; get one
// from Open. A Handle is safe for concurrent use. Its file descriptor never
// leaves it except for the duration of WithFd, so a concurrent Close can
// never leave a caller with a closed (or reused) descriptor number.
type Handle struct {
	path  string
	inode uint64
	// cookie is the namespace's cookie once read (0: not yet).
	cookie atomic.Uint64

	mu     sync.RWMutex
	fd     int // -1 once closed
	closed bool
}

// Inode identifies the namespace: two handles refer to the same namespace
// exactly when their inodes are equal (nsfs has a single device).
func (h *Handle) Inode() uint64 { return h.inode }

// WithFd calls fn with the namespace's descriptor, which stays open until
// fn returns (Close waits for it). On a closed handle it returns ErrClosed
// without calling fn. fn must not keep the descriptor: dup it to hold the
// namespace longer.
func (h *Handle) WithFd(fn func(fd int) error) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return ErrClosed
	}
	return fn(h.fd)
}

// String describes the handle for logs.
func (h *Handle) String() string {
	return fmt.Sprintf("netns(%s, inode %d)", h.path, h.inode)
}
