package privtest

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LockBuilds waits for, then holds until unlock runs, a lock shared by
// the test processes that build meshlet's image binaries (the image test,
// the end-to-end DaemonSet test). go test runs packages
// side by side, and two go builds of the same packages at once both
// compile them: the build cache only helps the one that starts after the
// other is done. Taking turns, the second finds the daemon's dependencies
// compiled (from a cold cache, about 9 CPU-minutes each time).
func LockBuilds() (unlock func(), err error) {
	name := filepath.Join(os.TempDir(), "meshlet-go-build.lock")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("build lock %s: %w", name, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}
