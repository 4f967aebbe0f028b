package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// NodeLockFile is the lock, in the state directory, that the meshlet
// serving the node holds for as long as it runs.
const NodeLockFile = "meshlet.lock"

// lockPoll is how often a waiting meshlet tries the lock.
const lockPoll = 100 * time.Millisecond

// AcquireNodeLock waits until this process holds the node lock. During a
// DaemonSet update two meshlets can run on a node; the runtime's NRI
// registration and ztunnel's socket belong to one of them at a time, so
// the new one waits here, before it touches either, until the old one
// exits (the kernel drops a dead process's lock). The lock is released
// when the process exits or release is called. waiting, if set, is called
// once when another process holds the lock.
//
// The holder writes its revision (--revision, maybe none) into the lock:
// a meshlet of one revision never waits for another revision's, which is
// not a predecessor but a neighbour given the same --state-dir, and would
// never exit. That is refused, naming both.
func AcquireNodeLock(ctx context.Context, stateDir, revision string, waiting func()) (release func(), err error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", stateDir, err)
	}
	path := filepath.Join(stateDir, NodeLockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("node lock: %w", err)
	}
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if logged {
				klog.FromContext(ctx).Info("Node lock acquired: the previous meshlet exited", "lock", path)
			}
			if err := writeLockRevision(f, revision); err != nil {
				f.Close()
				return nil, fmt.Errorf("node lock %s: %w", path, err)
			}
			return func() { f.Close() }, nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("node lock %s: %w", path, err)
		}
		if holder, err := lockRevision(f); err == nil && holder != "" && revision != "" && holder != revision {
			f.Close()
			return nil, fmt.Errorf("node lock %s: held by the meshlet of revision %q, and this one serves revision %q: "+
				"each revision's meshlet needs a --state-dir of its own", path, holder, revision)
		}
		if !logged {
			klog.FromContext(ctx).Info("Another meshlet serves this node; waiting for it to exit before taking the runtime hook and ztunnel's socket", "lock", path)
			logged = true
			if waiting != nil {
				waiting()
			}
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the node lock %s: %w", path, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
}

// writeLockRevision makes revision the lock file's content.
func writeLockRevision(f *os.File, revision string) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(revision), 0)
	return err
}

// lockRevision reads the holder's revision from the lock file.
func lockRevision(f *os.File) (string, error) {
	b := make([]byte, 256)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return string(b[:n]), nil
}
