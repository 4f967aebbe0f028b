// Package privtest gates tests that need root (network namespaces,
// nftables, mounts). Outside CI they skip loudly; with CI=true a missing
// privilege is a failure, because CI runs as root and a skipped kernel test
// there would hide a broken setup.
package privtest

import (
	"fmt"
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

// MainEnv is RequireEnv for a TestMain that sets up a shared environment:
// it returns the variable's value, or ends the test binary, failing with
// CI=true and skipping loudly elsewhere. needRoot adds the root check.
func MainEnv(pkg, name, why string, needRoot bool) string {
	v := os.Getenv(name)
	if v != "" && (!needRoot || os.Geteuid() == 0) {
		return v
	}
	msg := fmt.Sprintf("%s tests need %s (%s)", pkg, name, why)
	if needRoot {
		msg = fmt.Sprintf("%s tests need root and %s (%s)", pkg, name, why)
	}
	if os.Getenv("CI") == "true" {
		fmt.Fprintln(os.Stderr, "FAIL: "+msg)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "SKIPPING: "+msg)
	os.Exit(0)
	return ""
}
