package privtest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder stands in for a test: it records how Get ended it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(f string, a ...any) {
	r.skipped = fmt.Sprintf(f, a...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(f string, a ...any) {
	r.failed = fmt.Sprintf(f, a...)
	runtime.Goexit()
}

// get calls s.Get as a test would, on a goroutine of its own because
// skipping and failing end the calling goroutine.
func get[T any](s *Shared[T]) (v T, r *recorder) {
	r = &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		v = s.Get(r)
	}()
	<-done
	return v, r
}

func TestSharedMissingSkipsWithTheReason(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("PRIVTEST_UNSET", "")
	var s Shared[*int]
	if v := s.Require("pkg/x", "PRIVTEST_UNSET", "what install.sh prints", false); v != "" {
		t.Fatalf("Require = %q for an unset variable", v)
	}
	v, r := get(&s)
	if v != nil || r.failed != "" || !strings.Contains(r.skipped, "pkg/x tests need PRIVTEST_UNSET (what install.sh prints)") {
		t.Fatalf("Get without the environment: value %v, skipped %q, failed %q; want a skip naming the variable", v, r.skipped, r.failed)
	}

	t.Setenv("CI", "true")
	if _, r := get(&s); r.skipped != "" || !strings.Contains(r.failed, "PRIVTEST_UNSET") {
		t.Fatalf("Get with CI=true: skipped %q, failed %q; want a failure naming the variable", r.skipped, r.failed)
	}
}

func TestSharedReady(t *testing.T) {
	t.Setenv("PRIVTEST_SET", "/some/dir")
	var s Shared[*int]
	if v := s.Require("pkg/x", "PRIVTEST_SET", "why", false); v != "/some/dir" {
		t.Fatalf("Require = %q, want the variable's value", v)
	}
	want := new(int)
	s.Set(want)
	if v, r := get(&s); v != want || r.skipped != "" || r.failed != "" {
		t.Fatalf("Get = %v (skipped %q, failed %q), want the environment Set recorded", v, r.skipped, r.failed)
	}
}

// A TestMain that forgot to set the environment up must not let tests run
// against a nil environment, nor skip them silently.
func TestSharedNeverSetUpFails(t *testing.T) {
	t.Setenv("CI", "")
	var s Shared[*int]
	if _, r := get(&s); r.skipped != "" || r.failed == "" {
		t.Fatalf("Get on an environment never set up: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
}

// requireFile calls RequireFile as a test would (on a goroutine of its own:
// skipping and failing end it).
func requireFile(path string) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		RequireFile(r, path, "the X package")
	}()
	<-done
	return r
}

func TestRequireFile(t *testing.T) {
	if r := requireFile(t.TempDir()); r.skipped != "" || r.failed != "" {
		t.Fatalf("an existing path: skipped %q, failed %q", r.skipped, r.failed)
	}
	t.Setenv("CI", "")
	missing := t.TempDir() + "/absent"
	if r := requireFile(missing); r.failed != "" || !strings.Contains(r.skipped, missing) || !strings.Contains(r.skipped, "the X package") {
		t.Fatalf("a missing path outside CI: skipped %q, failed %q; want a skip naming it and why", r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	if r := requireFile(missing); r.skipped != "" || !strings.Contains(r.failed, missing) {
		t.Fatalf("a missing path with CI=true: skipped %q, failed %q; want a failure naming it", r.skipped, r.failed)
	}
}
