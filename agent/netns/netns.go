package netns

import (
	"errors"
	"fmt"
	"sync"
)

// ErrNotNetns is returned when a path exists but is not a network namespace.
var ErrNotNetns = errors.New("not a network namespace")

// ErrClosed is returned by operations on a closed Handle.
var ErrClosed = errors.New("netns handle closed")

// Handle is an open network namespace. The zero value is not usable; get one
// from Open or FromFd. A Handle is safe for concurrent use.
type Handle struct {
	path  string
	inode uint64

	mu     sync.RWMutex
	fd     int // -1 once closed
	closed bool
}

// Path is the path the namespace was opened from (informational: the path
// may be gone while the handle stays valid).
func (h *Handle) Path() string { return h.path }

// Inode identifies the namespace: two handles refer to the same namespace
// exactly when their inodes are equal (nsfs has a single device).
func (h *Handle) Inode() uint64 { return h.inode }

// Fd returns the open descriptor. It stays valid until Close.
func (h *Handle) Fd() uintptr {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return uintptr(h.fd)
}

// String describes the handle for logs.
func (h *Handle) String() string {
	return fmt.Sprintf("netns(%s, inode %d)", h.path, h.inode)
}
