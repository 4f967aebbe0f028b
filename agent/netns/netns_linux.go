package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Open opens the network namespace at path (a bind mount such as
// /var/run/netns/<name> or /proc/<pid>/ns/net) and checks that it is one.
func Open(path string) (*Handle, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open netns: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	if fd < 3 {
		// The netlink and nftables libraries read a namespace fd of 0 as
		// "the current namespace", the node's: never hand one out.
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		_ = unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("netns %s: dup fd: %w", path, err)
		}
		fd = high
	}
	inode, err := Identify(fd)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	return &Handle{path: path, inode: inode, fd: fd}, nil
}

// Identify checks that fd refers to a network namespace and returns its
// inode. It asks the kernel (NS_GET_NSTYPE) rather than trusting the path,
// so a mount namespace or a regular file is refused.
func Identify(fd int) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, fmt.Errorf("fstatfs: %w", err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return 0, fmt.Errorf("%w: filesystem magic %#x, want nsfs %#x", ErrNotNetns, fs.Type, unix.NSFS_MAGIC)
	}
	nstype, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return 0, fmt.Errorf("ioctl NS_GET_NSTYPE: %w", err)
	}
	if nstype != unix.CLONE_NEWNET {
		return 0, fmt.Errorf("%w: namespace type %#x", ErrNotNetns, nstype)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fstat: %w", err)
	}
	return st.Ino, nil
}

// Close releases the namespace fd. It is idempotent.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	fd := h.fd
	h.fd = -1
	return unix.Close(fd)
}

// RunIn runs fn on a fresh goroutine locked to its OS thread, with that
// thread switched into the network namespace fd refers to, so the caller's
// thread never changes namespace. A child process started by fn (exec)
// inherits the namespace; goroutines fn starts do not (they run on other
// threads). Afterwards the thread is switched back to where it was,
// whatever fn did to it (it may even unshare a new namespace); if that
// fails, the thread stays locked and the Go runtime discards it when the
// goroutine ends, so no other goroutine ever runs in the wrong namespace.
func RunIn(fd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- runLocked(fd, fn) }()
	return <-errc
}

func runLocked(target int, fn func() error) error {
	runtime.LockOSThread()
	origin, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer unix.Close(origin)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns into target netns: %w", err)
	}
	fnErr := fn()
	if err := unix.Setns(origin, unix.CLONE_NEWNET); err != nil {
		// Keep the thread locked: the runtime discards it when this
		// goroutine exits.
		return errors.Join(fnErr, fmt.Errorf("setns back to origin netns (thread discarded): %w", err))
	}
	runtime.UnlockOSThread()
	return fnErr
}
