// Package privtest gates tests that need root (network namespaces,
// nftables, mounts). Outside CI they skip loudly; with CI=true a missing
// privilege is a failure, because CI runs as root and a skipped kernel test
// there would hide a broken setup.
package privtest

import (
	"os"
	"testing"
)

// RequireRoot fails (CI=true) or skips (elsewhere) unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs root (network namespaces, mounts); CI=true runs must be root")
	}
	t.Skipf("SKIPPING: this test needs root (network namespaces, mounts); run `sudo make test`")
}

// RequireEnv returns the environment variable name, which a test needs
// (e.g. the directory of binaries an install script built). Missing: a
// failure with CI=true, a loud skip elsewhere.
func RequireEnv(t testing.TB, name, why string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not set: %s", name, why)
	}
	t.Skipf("SKIPPING: %s is not set: %s", name, why)
	return ""
}
