//go:build !linux

package draplugin

import "testing"

// readOnlyDir makes dir read-only with a bind mount: Linux only.
func readOnlyDir(t *testing.T, _ string) {
	t.Fatal("read-only bind mounts need Linux: run this test on Linux")
}
