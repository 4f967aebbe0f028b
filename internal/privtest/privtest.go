// Package privtest gates tests that need root (network namespaces,
// nftables, mounts) or an environment an install script builds. Outside CI
// they skip loudly, each test with its reason, so `go test -v` says what did
// not run; with CI=true a missing prerequisite is a failure, because CI runs
// as root with everything installed and a skipped test there would hide a
// broken setup.
package privtest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

func inCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot fails (CI=true) or skips (elsewhere) unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if inCI() {
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
	if inCI() {
		t.Fatalf("%s is not set: %s", name, why)
	}
	t.Skipf("SKIPPING: %s is not set: %s", name, why)
	return ""
}

// RequireFile fails (CI=true) or skips (elsewhere) unless path exists:
// something a system package installs (why names it).
func RequireFile(t testing.TB, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	} else if inCI() {
		t.Fatalf("%s: %v (%s)", path, err, why)
	} else {
		t.Skipf("SKIPPING: %s: %v (%s)", path, err, why)
	}
}

// RequireCommand fails (CI=true) or skips (elsewhere) unless the command
// is on PATH (why says what provides it).
func RequireCommand(t testing.TB, name, why string) {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return
	} else if inCI() {
		t.Fatalf("%s: %v (%s)", name, err, why)
	} else {
		t.Skipf("SKIPPING: %s: %v (%s)", name, err, why)
	}
}

// Shared is an environment a package's TestMain sets up once for all its
// tests (a control plane, a containerd). Tests reach it only through Get,
// so none can run without it: where a prerequisite is missing, TestMain
// still runs the tests and Get skips each one that needs the environment
// with the reason, instead of the binary exiting early and `go test`
// reporting a bare "ok" for tests that never ran.
type Shared[T any] struct {
	val     T
	ready   bool
	missing string // why the environment is unavailable
}

// Require is called by TestMain before it sets the environment up. It
// returns the variable name's value (needRoot: and checks for root), or
// "" after recording why the tests cannot have the environment; TestMain
// then skips the set-up and calls m.Run. With CI=true a missing
// prerequisite ends the test binary with a failure naming it.
func (s *Shared[T]) Require(pkg, name, why string, needRoot bool) string {
	v := os.Getenv(name)
	switch {
	case v == "":
		s.missing = fmt.Sprintf("%s tests need %s (%s)", pkg, name, why)
	case needRoot && os.Geteuid() != 0:
		s.missing = fmt.Sprintf("%s tests need root (network namespaces, mounts); run `sudo make test`", pkg)
	default:
		return v
	}
	if inCI() {
		fmt.Fprintln(os.Stderr, "FAIL: "+s.missing+"; CI=true runs must have it")
		os.Exit(1)
	}
	return ""
}

// Set records the environment TestMain set up.
func (s *Shared[T]) Set(v T) { s.val, s.ready = v, true }

// Get returns the environment, or ends the test: a skip with the reason
// Require recorded (a failure with CI=true).
func (s *Shared[T]) Get(t testing.TB) T {
	t.Helper()
	if s.ready {
		return s.val
	}
	switch {
	case s.missing == "":
		// TestMain neither set the environment up nor said why not.
		t.Fatalf("the shared test environment was not set up (TestMain must call Require and Set)")
	case inCI():
		t.Fatalf("%s", s.missing)
	}
	t.Skipf("SKIPPING: %s", s.missing)
	return s.val
}
