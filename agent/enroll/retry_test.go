package enroll

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time for the core's schedule.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (f *fakeRedirector) setFailApply(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failApply = err
}

// TestRunningPodRetried: a running pod whose convergence fails is tried
// again with doubling delays until it succeeds, and the observer hears of
// each failure; its status says so meanwhile. A starting pod's failure is
// the runtime's to retry, and a pod that stops leaves the schedule.
func TestRunningPodRetried(t *testing.T) {
	h := newHarness(t)
	clk := &clock{t: time.Unix(1000, 0)}
	h.core.now = clk.now
	type failure struct {
		attempt int
		next    time.Duration
	}
	var heard []failure
	h.core.retried = func(pod PodRef, attempt int, next time.Duration, err error) {
		if !strings.Contains(err.Error(), "boom") {
			t.Errorf("observer told of pod %s: %v; want the redirector's failure", pod.UID, err)
		}
		if pod.UID == "a" {
			heard = append(heard, failure{attempt, next})
		}
	}

	h.redir.setFailApply(errors.New("boom"))
	p := h.pod("a", 100, meshOn)
	if _, err := h.core.Reconcile(ctx, []Pod{p}); FailedStep(err) != StepRedirect {
		t.Fatalf("Reconcile = %v, want a redirect failure", err)
	}
	st := wantState(t, h, "a", StateFailed, "boom")
	if st.Retries != 1 || !st.RetryAt.Equal(clk.now().Add(RetryMin)) || !strings.Contains(st.LastError, "boom") {
		t.Fatalf("status %+v; want one retry due in %v", st, RetryMin)
	}

	// Not due yet: nothing is tried.
	h.rec.take()
	h.core.retryPod(ctx, "a")
	wantCalls(t, h)

	clk.advance(RetryMin)
	h.core.retryPod(ctx, "a")
	wantCalls(t, h, "apply a inode=100 dns=true")
	if st := wantState(t, h, "a", StateFailed, "boom"); st.Retries != 2 || !st.RetryAt.Equal(clk.now().Add(2*RetryMin)) {
		t.Fatalf("status %+v; want the second retry in %v", st, 2*RetryMin)
	}

	h.redir.setFailApply(nil)
	clk.advance(2 * RetryMin)
	h.core.retryPod(ctx, "a")
	wantCalls(t, h, "apply a inode=100 dns=true", "add a inode=100 sa=sa-name-a")
	if st := wantState(t, h, "a", StateEnrolled, "pod-label"); st.Retries != 0 || st.LastError != "" {
		t.Fatalf("status %+v after the retry succeeded; want no retry pending", st)
	}
	if n := h.core.Retrying(); n != 0 {
		t.Fatalf("Retrying = %d after success", n)
	}
	if want := []failure{{1, RetryMin}, {2, 2 * RetryMin}}; !equalFailures(heard, want) {
		t.Fatalf("observer heard %v, want %v", heard, want)
	}

	// A starting pod (a runtime hook) is not retried: the runtime
	// refuses its sandbox.
	h.redir.setFailApply(errors.New("boom"))
	if _, err := h.core.Enroll(ctx, h.pod("starting", 101, meshOn)); err == nil {
		t.Fatal("Enroll succeeded with a failing redirector")
	}
	if st, _ := h.core.Status("starting"); st.Retries != 0 {
		t.Fatalf("starting pod scheduled for a retry: %+v", st)
	}

	// A running pod that stops leaves the schedule.
	if _, err := h.core.EnrollRunning(ctx, h.pod("stops", 102, meshOn)); err == nil {
		t.Fatal("EnrollRunning succeeded with a failing redirector")
	}
	if n := h.core.Retrying(); n != 1 {
		t.Fatalf("Retrying = %d, want the running pod", n)
	}
	if err := h.core.Release(ctx, "stops", ""); err != nil {
		t.Fatal(err)
	}
	if n := h.core.Retrying(); n != 0 {
		t.Fatalf("Retrying = %d after the pod stopped", n)
	}
}

func equalFailures[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFailedReprogramRetried: an enrolled pod whose new settings cannot be
// written keeps its enrollment and its old rules, and RunRetries (on the
// real clock) writes them once the redirector takes them, without ztunnel
// ever being told to drop the pod.
func TestFailedReprogramRetried(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	h.redir.setFailApply(errors.New("boom"))
	h.core.SetDefaults(Settings{DNSCapture: false})
	if err := h.core.Reevaluate(ctx); FailedStep(err) != StepRedirect {
		t.Fatalf("Reevaluate = %v, want a redirect failure", err)
	}
	if st := wantState(t, h, "a", StateEnrolled, "pod-label"); st.Retries != 1 {
		t.Fatalf("status %+v; want enrolled, one retry pending", st)
	}
	h.redir.setFailApply(nil)

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.core.RunRetries(rctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * RetryMin)
	for {
		if r, _ := h.core.Record("a"); !r.Settings.DNSCapture {
			break
		}
		if time.Now().After(deadline) {
			st, _ := h.core.Status("a")
			t.Fatalf("pod not re-programmed by RunRetries within %v: %+v", 10*RetryMin, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, call := range h.rec.take() {
		if strings.HasPrefix(call, "del ") || strings.HasPrefix(call, "remove ") {
			t.Fatalf("the pod's rewrite and retry made the call %q; want only apply and add", call)
		}
	}
	if st := wantState(t, h, "a", StateEnrolled, "pod-label"); st.Retries != 0 {
		t.Fatalf("status %+v after the retry; want none pending", st)
	}
}

// TestRetryOfABusyPodIsPutOff: a retry that finds another operation on the
// pod (a re-evaluation stuck in the redirector) does not wait for it past
// a bound, and stays scheduled; the other operation's success clears it.
func TestRetryOfABusyPodIsPutOff(t *testing.T) {
	h := newHarness(t)
	clk := &clock{t: time.Unix(1000, 0)}
	h.core.now = clk.now
	h.redir.setFailApply(errors.New("boom"))
	if _, err := h.core.Reconcile(ctx, []Pod{h.pod("a", 100, meshOn)}); FailedStep(err) != StepRedirect {
		t.Fatalf("Reconcile = %v, want a redirect failure", err)
	}
	h.redir.setFailApply(nil)
	entered, release := make(chan struct{}), make(chan struct{})
	h.redir.mu.Lock()
	h.redir.hook = func(string) {
		close(entered)
		<-release
	}
	h.redir.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- h.core.Reevaluate(ctx) }()
	<-entered

	clk.advance(RetryMin)
	h.core.retryPod(ctx, "a") // waits retryLockWait, then puts the retry off
	h.core.retryMu.Lock()
	at, scheduled := h.core.retrying["a"]
	h.core.retryMu.Unlock()
	if !scheduled || !at.Equal(clk.now().Add(retryBusy)) {
		t.Fatalf("retry of the busy pod: scheduled %t at %v; want it put off to %v", scheduled, at, clk.now().Add(retryBusy))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := h.core.Retrying(); n != 0 {
		t.Fatalf("Retrying = %d after the re-evaluation enrolled the pod", n)
	}
	wantState(t, h, "a", StateEnrolled, "pod-label")
}
