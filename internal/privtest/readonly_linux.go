package privtest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadOnlyDir makes dir unwritable for the rest of the test. As root,
// permissions are no obstacle, so it bind-mounts dir read-only over itself.
func ReadOnlyDir(t testing.TB, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
		return
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("cannot make %s read-only as root (bind mount: %v)", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("cannot remount %s read-only: %v", dir, err)
	}
}
