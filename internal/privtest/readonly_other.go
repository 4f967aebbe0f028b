//go:build !linux

package privtest

import "testing"

// ReadOnlyDir makes dir read-only with a bind mount: Linux only.
func ReadOnlyDir(t testing.TB, _ string) {
	t.Fatal("read-only bind mounts need Linux: run this test on Linux")
}
