package enroll

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var ctx = context.Background()

func wantCalls(t *testing.T, h *harness, want ...string) {
	t.Helper()
	if got := h.rec.take(); !slices.Equal(got, want) {
		t.Fatalf("port calls\n got  %q\n want %q", got, want)
	}
}

func wantState(t *testing.T, h *harness, uid string, st State, reasonHas string) PodStatus {
	t.Helper()
	s, ok := h.core.Status(uid)
	if !ok {
		t.Fatalf("pod %s unknown to the core", uid)
	}
	if s.State != st || !strings.Contains(s.Reason, reasonHas) {
		t.Fatalf("pod %s: state %s reason %q, want %s with %q", uid, s.State, s.Reason, st, reasonHas)
	}
	return s
}

func TestEnrollLabelledPod(t *testing.T) {
	h := newHarness(t)
	res, err := h.core.Enroll(ctx, h.pod("a", 100, meshOn))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Enrolled || !res.Changed || res.Reason != "pod-label" {
		t.Fatalf("result %+v", res)
	}
	wantCalls(t, h, "apply a inode=100 dns=true", "add a inode=100 sa=sa-name-a")
	if st := wantState(t, h, "a", StateEnrolled, "pod-label"); st.NetnsInode != 100 {
		t.Fatalf("status inode %d", st.NetnsInode)
	}
	if got := h.status.of("a"); !slices.Equal(got, []RedirectionStatus{RedirectionPending, RedirectionEnabled}) {
		t.Fatalf("status reports %v, want pending then enabled", got)
	}
	if h.opener.openCount() != 1 {
		t.Fatalf("%d netns fds open, want 1 held", h.opener.openCount())
	}
}

func TestEnrollIsIdempotent(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	for range 3 {
		if _, err := h.core.Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	res, err := h.core.Enroll(ctx, p)
	if err != nil || !res.Enrolled || res.Changed {
		t.Fatalf("repeat Enroll = %+v, %v; want enrolled and unchanged", res, err)
	}
	wantCalls(t, h, "apply a inode=100 dns=true", "add a inode=100 sa=sa-name-a")
	if h.opener.openCount() != 1 {
		t.Fatalf("%d netns fds open after repeats, want 1", h.opener.openCount())
	}
}

func TestEnrollNewNetnsReplacesOld(t *testing.T) {
	h := newHarness(t)
	if _, err := h.core.Enroll(ctx, h.pod("a", 100, meshOn)); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	res, err := h.core.Enroll(ctx, h.pod("a", 200, meshOn))
	if err != nil || !res.Changed {
		t.Fatalf("Enroll with new netns = %+v, %v", res, err)
	}
	// The old sandbox is going away: only host-side state is removed, and
	// the old netns is never entered.
	wantCalls(t, h, "del a", "remove a inode=100 scope=host", "apply a inode=200 dns=true", "add a inode=200 sa=sa-name-a")
	wantState(t, h, "a", StateEnrolled, "")
	if h.opener.openCount() != 1 {
		t.Fatalf("%d netns fds open, want only the new one", h.opener.openCount())
	}
}

func TestEnrollChangedOptionsSameNetnsReapplies(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	p.Annotations = map[string]string{"dns": "off"}
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	// The rules are rewritten in place (no Remove first: no moment
	// without them), and ztunnel keeps the pod: no Del, which would drain
	// it; the Add in the same netns is a no-op for ztunnel.
	wantCalls(t, h, "apply a inode=100 dns=false", "add a inode=100 sa=sa-name-a")

	// New rules that do not go in: the pod stays as it was, enrolled with
	// its old rules (the redirector leaves them), and ztunnel keeps it.
	h.rec.take()
	h.redir.failApply = errors.New("boom")
	p.Annotations = map[string]string{"dns": "on"}
	if _, err := h.core.Enroll(ctx, p); FailedStep(err) != StepRedirect {
		t.Fatalf("Enroll with a failing redirector = %v, want a redirect failure", err)
	}
	wantCalls(t, h, "apply a inode=100 dns=true")
	if !h.proxy.uids()["a"] {
		t.Fatal("the proxy lost a pod whose rewrite failed")
	}
	wantState(t, h, "a", StateEnrolled, "pod-label")
	if rec, _ := h.core.Record("a"); rec.Settings.DNSCapture {
		t.Fatal("the record says dns capture on: the rules that went in are the old ones")
	}

	// A new service account in the same netns: the old workload goes (the
	// Add of a netns ztunnel has is a no-op to it), the rules are rewritten.
	h.redir.failApply = nil
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	p.Name = "renamed"
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "del a", "remove a inode=100 scope=all", "apply a inode=100 dns=true", "add a inode=100 sa=sa-renamed")
}

func TestEnrollRollback(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name   string
		break_ func(h *harness, p *Pod)
		step   Step
		calls  []string
		status []RedirectionStatus
	}{
		{"resolve fails", func(h *harness, p *Pod) { h.resolver.err = boom }, StepResolve, nil, nil},
		{"netns missing", func(h *harness, p *Pod) { p.NetnsPath = "/netns/gone" }, StepNetns, nil, nil},
		{"no netns path", func(h *harness, p *Pod) { p.NetnsPath = "" }, StepNetns, nil, nil},
		{"netns without the pod's IPs", func(h *harness, p *Pod) {
			p.IPs = []netip.Addr{netip.MustParseAddr("192.0.2.10")}
			h.opener.withoutIPs = map[string]bool{p.NetnsPath: true}
		}, StepNetns, nil, nil},
		{"redirect fails", func(h *harness, p *Pod) { h.redir.failApply = boom }, StepRedirect,
			[]string{"apply a inode=100 dns=true"}, nil},
		{"ztunnel fails", func(h *harness, p *Pod) { h.proxy.failAdd = boom }, StepProxy,
			[]string{"apply a inode=100 dns=true", "add a inode=100 sa=sa-name-a", "remove a inode=100 scope=all"},
			[]RedirectionStatus{RedirectionPending, RedirectionRemoved}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			p := h.pod("a", 100, meshOn)
			c.break_(h, &p)
			res, err := h.core.Enroll(ctx, p)
			if err == nil || res.Enrolled {
				t.Fatalf("Enroll = %+v, %v; want a failure", res, err)
			}
			if FailedStep(err) != c.step {
				t.Fatalf("failed step %q (%v), want %q", FailedStep(err), err, c.step)
			}
			if !strings.Contains(err.Error(), "pod a") {
				t.Fatalf("error %q does not name the pod", err)
			}
			wantCalls(t, h, c.calls...)
			wantState(t, h, "a", StateFailed, string(c.step))
			if h.opener.openCount() != 0 {
				t.Fatalf("%d netns fds left open after a failed enrollment", h.opener.openCount())
			}
			if h.redir.has("a") || len(h.proxy.uids()) != 0 {
				t.Fatalf("failed enrollment left rules or a ztunnel workload behind")
			}
			if got := h.status.of("a"); !slices.Equal(got, c.status) {
				t.Fatalf("status reports %v, want %v", got, c.status)
			}

			// Once the cause is gone, a retry enrolls.
			h.resolver.err, h.redir.failApply, h.proxy.failAdd = nil, nil, nil
			h.opener.withoutIPs = nil
			p = h.pod("a", 100, meshOn)
			if _, err := h.core.Enroll(ctx, p); err != nil {
				t.Fatalf("retry: %v", err)
			}
			wantState(t, h, "a", StateEnrolled, "")
		})
	}
}

func TestResolveFailureKeepsEnrolledPod(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	h.resolver.err = errors.New("api down")
	res, err := h.core.Enroll(ctx, p)
	if FailedStep(err) != StepResolve || !res.Enrolled {
		t.Fatalf("Enroll with resolver down = %+v, %v; want resolve error and still enrolled", res, err)
	}
	wantCalls(t, h)
	wantState(t, h, "a", StateEnrolled, "")
}

func TestSkippedPods(t *testing.T) {
	h := newHarness(t)
	plain := h.pod("plain", 1, nil)
	host := Pod{UID: "host", Name: "host", Namespace: "default", HostNetwork: true, Labels: meshOn}
	for _, p := range []Pod{plain, host} {
		res, err := h.core.Enroll(ctx, p)
		if err != nil || res.Enrolled {
			t.Fatalf("Enroll(%s) = %+v, %v", p.UID, res, err)
		}
	}
	wantCalls(t, h)
	wantState(t, h, "plain", StateSkipped, "not-selected")
	wantState(t, h, "host", StateSkipped, "host-network")
	if h.opener.openCount() != 0 {
		t.Fatalf("netns opened for a skipped pod")
	}
}

func TestRelease(t *testing.T) {
	h := newHarness(t)
	if _, err := h.core.Enroll(ctx, h.pod("a", 100, meshOn)); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	if err := h.core.Release(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "del a", "remove a inode=100 scope=host")
	wantState(t, h, "a", StateReleased, "stopped")
	if h.opener.openCount() != 0 {
		t.Fatalf("netns still held after release")
	}
	// Releasing again, or an unknown pod, does nothing.
	if err := h.core.Release(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	if err := h.core.Release(ctx, "never-seen", ""); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h)
	if err := h.core.Forget(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.core.Status("a"); ok {
		t.Fatal("forgotten pod still known")
	}
}

// TestForgetUnchanged: a pod is forgotten only while it is as the caller
// saw it; one that changed since (here: stopped) is kept.
func TestForgetUnchanged(t *testing.T) {
	h := newHarness(t)
	if _, err := h.core.Enroll(ctx, h.pod("a", 100, meshOn)); err != nil {
		t.Fatal(err)
	}
	seen, _ := h.core.Status("a")
	if err := h.core.Release(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	if forgot, err := h.core.ForgetUnchanged(ctx, seen); forgot || err != nil {
		t.Fatalf("ForgetUnchanged with a status from before the pod changed = %v, %v; want it kept", forgot, err)
	}
	wantState(t, h, "a", StateReleased, "stopped")
	now, _ := h.core.Status("a")
	if forgot, err := h.core.ForgetUnchanged(ctx, now); !forgot || err != nil {
		t.Fatalf("ForgetUnchanged with the current status = %v, %v; want it forgotten", forgot, err)
	}
	if _, ok := h.core.Status("a"); ok {
		t.Fatal("forgotten pod still known")
	}
	if forgot, err := h.core.ForgetUnchanged(ctx, now); forgot || err != nil {
		t.Fatalf("ForgetUnchanged of an unknown pod = %v, %v; want nothing done", forgot, err)
	}
}

func TestReconcile(t *testing.T) {
	h := newHarness(t)
	kept := h.pod("kept", 1, meshOn)
	stale := h.pod("stale", 2, meshOn)
	for _, p := range []Pod{kept, stale} {
		if _, err := h.core.Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	h.rec.take()
	missing := h.pod("missing", 3, meshOn)
	plain := h.pod("plain", 4, nil)
	broken := h.pod("broken", 5, meshOn)
	broken.NetnsPath = "/netns/none"
	_, err := h.core.Reconcile(ctx, []Pod{kept, missing, plain, broken})
	if FailedStep(err) != StepNetns || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Reconcile error %v, want the broken pod's netns failure", err)
	}
	got := h.rec.take()
	slices.Sort(got)
	want := []string{"add missing inode=3 sa=sa-name-missing", "apply missing inode=3 dns=true", "del stale",
		"remove plain inode=4 scope=all", // a skipped pod new to the core: leftovers cleared
		"remove stale inode=2 scope=host"}
	if !slices.Equal(got, want) {
		t.Fatalf("reconcile calls\n got  %q\n want %q (no duplicate add for the unchanged pod)", got, want)
	}
	if _, ok := h.core.Status("stale"); ok {
		t.Fatal("stale pod still known")
	}
	wantState(t, h, "missing", StateEnrolled, "")
	wantState(t, h, "plain", StateSkipped, "")
	wantState(t, h, "broken", StateFailed, "netns")
	if h.opener.openCount() != 2 {
		t.Fatalf("%d netns held, want 2 (kept, missing)", h.opener.openCount())
	}
}

func TestReevaluateNamespaceLabel(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, nil)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	wantState(t, h, "a", StateSkipped, "not-selected")

	h.resolver.setNamespace("default", meshOn)
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, h, "a", StateEnrolled, "namespace-label")
	wantCalls(t, h, "apply a inode=100 dns=true", "add a inode=100 sa=sa-name-a")

	h.resolver.setNamespace("default", nil)
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	// The pod keeps running: its in-pod rules must go too.
	wantCalls(t, h, "del a", "remove a inode=100 scope=all")
	wantState(t, h, "a", StateSkipped, "not-selected")
	// A running pod's handover is deferred: it never reads pending.
	if got := h.status.of("a"); !slices.Equal(got, []RedirectionStatus{RedirectionEnabled, RedirectionRemoved}) {
		t.Fatalf("status reports %v", got)
	}
	if h.opener.openCount() != 0 {
		t.Fatal("netns still held after opt-out")
	}

	// Stopped pods are not revived.
	h.resolver.setNamespace("default", meshOn)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := h.core.Release(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h)
}

// TestNodeWideRedirectionChange: when the redirector would now install
// other rules for an enrolled pod (a node-wide setting such as IPv6
// changed), converging the pod again re-programs it; while the account is
// the same nothing is touched; a pod the redirector would now refuse keeps
// the rules it has.
func TestNodeWideRedirectionChange(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h)

	h.redir.setNode(" ipv6=false", nil)
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "apply a inode=100 dns=true", "add a inode=100 sa=sa-name-a")
	wantState(t, h, "a", StateEnrolled, "pod-label")
	if rec, _ := h.core.Record("a"); rec.Redirection != "fake dns=true ipv6=false" {
		t.Fatalf("record's redirection %q, want the new account", rec.Redirection)
	}
	// The same pod from the runtime again: nothing to do.
	if res, err := h.core.Enroll(ctx, p); err != nil || res.Changed {
		t.Fatalf("Enroll again = %+v, %v; want unchanged", res, err)
	}
	wantCalls(t, h)

	// Inside a runtime's hook the change waits for the re-evaluation.
	h.redir.setNode(" ipv6=true", nil)
	if res, err := h.core.Enroll(ctx, p); err != nil || res.Changed {
		t.Fatalf("Enroll in a hook after a node-wide change = %+v, %v; want unchanged", res, err)
	}
	wantCalls(t, h)
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "apply a inode=100 dns=true", "add a inode=100 sa=sa-name-a")

	// Refused now: kept, even when its own settings change too.
	h.redir.setNode(" ipv6=false", errors.New("pod has only IPv6 addresses"))
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	h.core.SetDefaults(Settings{DNSCapture: false})
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h)
	wantState(t, h, "a", StateEnrolled, "pod-label")
	// A new pod is refused.
	if _, err := h.core.Enroll(ctx, h.pod("new", 101, meshOn)); FailedStep(err) != StepRedirect {
		t.Fatalf("Enroll of a new pod the redirector refuses = %v, want a redirect failure", err)
	}
	// A restarted core adopts the refused pod from its checkpoint as the
	// redirector keeps it.
	rec, _ := h.core.Record("a")
	h2 := newHarness(t, rec)
	h2.redir.setNode(" ipv6=false", errors.New("pod has only IPv6 addresses"))
	h2.opener.set(p.NetnsPath, 100)
	if _, err := h2.core.Reconcile(ctx, []Pod{p}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h2, "keep a inode=100", "add a inode=100 sa=sa-name-a")
	wantState(t, h2, "a", StateEnrolled, "pod-label")

	// Its identity changed (here: its name): ztunnel gets it again, its
	// rules stay.
	renamed := p
	renamed.Name = "renamed"
	if _, err := h2.core.Enroll(ctx, renamed); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h2, "del a", "remove a inode=100 scope=host", "keep a inode=100", "add a inode=100 sa=sa-renamed")

	// Restarted after the pod's settings changed while no agent ran: the
	// pod keeps the settings its rules were written with.
	h3 := newHarness(t, rec)
	h3.core.SetDefaults(Settings{DNSCapture: false})
	h3.redir.setNode(" ipv6=false", errors.New("pod has only IPv6 addresses"))
	h3.opener.set(p.NetnsPath, 100)
	if _, err := h3.core.Reconcile(ctx, []Pod{p}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h3, "keep a inode=100", "add a inode=100 sa=sa-name-a")
	if got, _ := h3.core.Record("a"); !got.Settings.DNSCapture {
		t.Fatalf("adopted record's settings %+v, want the checkpoint's (dnsCapture true)", got.Settings)
	}
}

// TestPodOptOutByLabel: a running pod whose own label changes is released
// by its next Enroll (the watcher calls Enroll with the updated pod).
func TestPodOptOutByLabel(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	p.Labels = nil
	res, err := h.core.Enroll(ctx, p)
	if err != nil || res.Enrolled || !res.Changed {
		t.Fatalf("Enroll after opt-out = %+v, %v", res, err)
	}
	wantCalls(t, h, "del a", "remove a inode=100 scope=all")
}

func TestCallsForOnePodAreSerialisedOthersParallel(t *testing.T) {
	h := newHarness(t)
	// Parallelism: two different pods must be inside Apply at once.
	both := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	h.redir.hook = func(uid string) {
		if uid == "p1" || uid == "p2" {
			arrived.Done()
			select {
			case <-both:
			case <-time.After(10 * time.Second):
				t.Errorf("pod %s waited alone in Apply: different pods do not run in parallel", uid)
			}
		}
	}
	go func() { arrived.Wait(); close(both) }()
	var wg sync.WaitGroup
	for _, uid := range []string{"p1", "p2"} {
		p := h.pod(uid, 1, meshOn)
		wg.Go(func() {
			if _, err := h.core.Enroll(ctx, p); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	h.redir.hook = nil

	// Serialisation: hammer one pod with Enroll (two netns), Release,
	// Forget and Reevaluate; no two Applies for it may overlap.
	for i := range 250 {
		p := h.pod("same", uint64(10+i%2), meshOn)
		wg.Go(func() {
			switch i % 5 {
			case 0, 1:
				_, _ = h.core.Enroll(ctx, p)
			case 2:
				_ = h.core.Release(ctx, "same", "")
			case 3:
				_ = h.core.Reevaluate(ctx)
			case 4:
				_ = h.core.Forget(ctx, "same", "")
			}
		})
	}
	wg.Wait()
	if h.redir.maxPerPod != 1 {
		t.Fatalf("%d concurrent Applies for one pod, want 1", h.redir.maxPerPod)
	}
	// Whatever the interleaving, the pod's final state is consistent, and
	// what readers see is what the slot holds.
	st, published := h.core.Status("same")
	if s, _ := h.core.lockSlot(ctx, "same", false); s == nil {
		if published {
			t.Fatalf("pod forgotten but still published as %s", st.State)
		}
	} else {
		slotState := s.state
		s.unlock()
		if !published || st.State != slotState {
			t.Fatalf("slot in state %s, published %t as %s", slotState, published, st.State)
		}
	}
	_, added := h.proxy.uids()["same"]
	if (st.State == StateEnrolled) != added {
		t.Fatalf("state %s but ztunnel has the pod: %t", st.State, added)
	}
	wantOpen := 2 // p1, p2
	if st.State == StateEnrolled {
		wantOpen++
	}
	if h.opener.openCount() != wantOpen {
		t.Fatalf("%d netns open, want %d", h.opener.openCount(), wantOpen)
	}
}

func TestPodsListsEveryKnownPod(t *testing.T) {
	h := newHarness(t)
	for i := range 5 {
		if _, err := h.core.Enroll(ctx, h.pod(fmt.Sprint(i), uint64(i+1), meshOn)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(h.core.Pods()); got != 5 {
		t.Fatalf("Pods() has %d entries, want 5", got)
	}
}

func TestNewRequiresEveryPort(t *testing.T) {
	_, err := New(Ports{Policy: labelPolicy{}}, Config{})
	if err == nil || !strings.Contains(err.Error(), "Redirector") || !strings.Contains(err.Error(), "Proxy") {
		t.Fatalf("New with missing ports: %v, want an error naming them", err)
	}
}

// TestHandover: a starting pod fails without ztunnel; pods that already run
// (Reconcile, Reevaluate) are registered for ztunnel's next connection.
func TestHandover(t *testing.T) {
	h := newHarness(t)
	h.proxy.disconnected = true
	if _, err := h.core.Enroll(ctx, h.pod("new", 1, meshOn)); FailedStep(err) != StepProxy {
		t.Fatalf("Enroll of a starting pod without ztunnel = %v, want a ztunnel failure", err)
	}
	if _, err := h.core.Reconcile(ctx, []Pod{h.pod("running", 2, meshOn)}); err != nil {
		t.Fatalf("Reconcile without ztunnel: %v", err)
	}
	wantState(t, h, "running", StateEnrolled, "")
	if _, ok := h.core.Status("new"); ok {
		t.Fatal("Reconcile did not forget the pod missing from the running set")
	}
}

// TestReconcileClearsLeftoversOfSkippedPods: a running pod that policy no
// longer selects may carry an older agent's rules; the first Reconcile
// that sees it removes them. Starting pods are not checked (they cannot
// have any), nor are pods the core already knows.
func TestReconcileClearsLeftoversOfSkippedPods(t *testing.T) {
	h := newHarness(t)
	running := h.pod("running", 7, nil)
	if _, err := h.core.Reconcile(ctx, []Pod{running}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "remove running inode=7 scope=all")
	if _, err := h.core.Reconcile(ctx, []Pod{running}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h)
	if _, err := h.core.Enroll(ctx, h.pod("starting", 8, nil)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h)
	if h.opener.openCount() != 0 {
		t.Fatalf("%d netns left open", h.opener.openCount())
	}
}

// TestOtherAgentsPods: a pod policy leaves to another agent is not
// cleared of rules at start-up (they are that agent's); a pod the core
// holds is decided as held (PodInfo.Held), also when its checkpointed
// record is all the core has of it.
func TestOtherAgentsPods(t *testing.T) {
	h := newHarness(t)
	other := h.pod("other", 7, map[string]string{"mesh": "other"})
	if _, err := h.core.Reconcile(ctx, []Pod{other}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h)
	wantState(t, h, "other", StateSkipped, "other-agent")

	// Enrolled, then its namespace says it is another's: it stays.
	mine := h.pod("mine", 8, nil)
	h.resolver.setNamespace("default", meshOn)
	if _, err := h.core.Enroll(ctx, mine); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	h.resolver.setNamespace("default", map[string]string{"mesh": "other"})
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantState(t, h, "mine", StateEnrolled, "")
	if _, err := h.core.Enroll(ctx, h.pod("new", 9, nil)); err != nil {
		t.Fatal(err)
	}
	wantState(t, h, "new", StateSkipped, "other-agent")

	// A restarted core holds what its checkpoint names.
	rec, _ := h.core.Record("mine")
	h2 := newHarness(t, rec)
	h2.resolver.setNamespace("default", map[string]string{"mesh": "other"})
	h2.opener.set(mine.NetnsPath, 8)
	if _, err := h2.core.Reconcile(ctx, []Pod{mine}); err != nil {
		t.Fatal(err)
	}
	wantState(t, h2, "mine", StateEnrolled, "")
}

// TestReleaseClearsTheStatus: a stopped sandbox's pod has its status
// removed; a pod that was never enrolled gets no report.
func TestReleaseClearsTheStatus(t *testing.T) {
	h := newHarness(t)
	for _, p := range []Pod{h.pod("a", 1, meshOn), h.pod("plain", 2, nil)} {
		if _, err := h.core.Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := h.core.Release(ctx, p.UID, ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.status.of("a"); !slices.Equal(got, []RedirectionStatus{RedirectionPending, RedirectionEnabled, RedirectionRemoved}) {
		t.Fatalf("status reports of a stopped mesh pod: %v", got)
	}
	if got := h.status.of("plain"); len(got) != 0 {
		t.Fatalf("status reports of a pod never enrolled: %v", got)
	}
}

func TestEnrolledIPs(t *testing.T) {
	h := newHarness(t)
	a := h.pod("a", 1, meshOn)
	a.IPs = []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}
	plain := h.pod("plain", 2, nil)
	plain.IPs = []netip.Addr{netip.MustParseAddr("192.0.2.2")}
	for _, p := range []Pod{a, plain} {
		if _, err := h.core.Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.core.EnrolledIPs(); !slices.Equal(got, a.IPs) {
		t.Fatalf("EnrolledIPs = %v, want the enrolled pod's %v", got, a.IPs)
	}
}

// TestEnrollRunningDefersTheHandover: a running pod found without a hook
// is enrolled for the next ztunnel when none is connected; a starting pod
// (Enroll) is refused instead.
func TestEnrollRunningDefersTheHandover(t *testing.T) {
	h := newHarness(t)
	h.proxy.disconnected = true
	if _, err := h.core.Enroll(ctx, h.pod("starting", 1, meshOn)); err == nil {
		t.Fatal("Enroll of a starting pod with no proxy connected succeeded")
	}
	res, err := h.core.EnrollRunning(ctx, h.pod("running", 2, meshOn))
	if err != nil || !res.Enrolled {
		t.Fatalf("EnrollRunning with no proxy connected = %+v, %v; want enrolled for the next connection", res, err)
	}
	if !h.proxy.uids()["running"] {
		t.Fatal("the running pod was not registered with the proxy")
	}
	if _, err := h.core.EnrollRunning(ctx, Pod{}); err == nil {
		t.Fatal("EnrollRunning of a pod without UID succeeded")
	}
}

// enrollTwoAndPlain enrolls mesh pods a and b (netns inodes 1, 2) and
// has pod plain (3) skipped.
func enrollTwoAndPlain(t *testing.T, h *harness) {
	t.Helper()
	for i, uid := range []string{"a", "b"} {
		if _, err := h.core.Enroll(ctx, h.pod(uid, uint64(i+1), meshOn)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.core.Enroll(ctx, h.pod("plain", 3, nil)); err != nil {
		t.Fatal(err)
	}
}

// TestUnmeshAll: an uninstall that must leave no pod redirected takes
// every enrolled pod out: ztunnel Del and the in-pod rules removed.
func TestUnmeshAll(t *testing.T) {
	h := newHarness(t)
	enrollTwoAndPlain(t, h)
	h.rec.take()
	if err := h.core.UnmeshAll(ctx); err != nil {
		t.Fatal(err)
	}
	got := h.rec.take()
	slices.Sort(got)
	want := []string{"del a", "del b", "remove a inode=1 scope=all", "remove b inode=2 scope=all"}
	if !slices.Equal(got, want) {
		t.Fatalf("calls\n got  %q\n want %q", got, want)
	}
	for _, uid := range []string{"a", "b"} {
		if st, _ := h.core.Status(uid); st.State != StateReleased {
			t.Fatalf("pod %s: state %v after UnmeshAll, want released", uid, st.State)
		}
	}
}

// TestEachEnrolled: fn sees every enrolled pod once, not a skipped one;
// its errors come back naming the pod, and the pods stay enrolled.
func TestEachEnrolled(t *testing.T) {
	h := newHarness(t)
	enrollTwoAndPlain(t, h)
	var mu sync.Mutex
	var seen []string
	err := h.core.EachEnrolled(ctx, func(_ context.Context, w *Workload) error {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s inode=%d", w.UID, w.NetnsInode))
		mu.Unlock()
		if w.UID == "b" {
			return errors.New("boom")
		}
		return nil
	})
	slices.Sort(seen)
	if want := []string{"a inode=1", "b inode=2"}; !slices.Equal(seen, want) {
		t.Fatalf("EachEnrolled saw %q, want %q", seen, want)
	}
	if err == nil || !strings.Contains(err.Error(), "pod b: boom") {
		t.Fatalf("EachEnrolled = %v, want the error naming pod b", err)
	}
	for _, uid := range []string{"a", "b"} {
		if st, _ := h.core.Status(uid); st.State != StateEnrolled {
			t.Fatalf("pod %s: state %v after EachEnrolled, want enrolled", uid, st.State)
		}
	}
}

// TestEnrollReadsIPsTheSourceDidNotGive: a pod whose source gave no IPs
// (containerd 1.7's NRI events carry none) is enrolled with the addresses
// its namespace holds, read once while the namespace stays the same.
func TestEnrollReadsIPsTheSourceDidNotGive(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	p.IPs = nil
	inNetns := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	h.opener.addrs = map[string][]netip.Addr{p.NetnsPath: inNetns}
	for range 2 { // RunPodSandbox, then the CreateContainer gate
		if res, err := h.core.Enroll(ctx, p); err != nil || !res.Enrolled {
			t.Fatalf("Enroll = %+v, %v", res, err)
		}
	}
	if got := h.proxy.added["a"].IPs; !slices.Equal(got, inNetns) {
		t.Fatalf("ztunnel got IPs %v, want the namespace's %v", got, inNetns)
	}
	if h.opener.addrReads != 1 {
		t.Fatalf("the namespace's addresses were read %d times, want once", h.opener.addrReads)
	}
	// A new sandbox (another namespace): read again.
	recreated := h.pod("a", 101, meshOn)
	recreated.IPs = nil
	h.opener.addrs[recreated.NetnsPath] = []netip.Addr{netip.MustParseAddr("10.0.0.7")}
	if _, err := h.core.Enroll(ctx, recreated); err != nil {
		t.Fatal(err)
	}
	if got := h.proxy.added["a"].IPs; h.opener.addrReads != 2 || !slices.Equal(got, h.opener.addrs[recreated.NetnsPath]) {
		t.Fatalf("after the sandbox was recreated: %d reads, ztunnel got %v", h.opener.addrReads, got)
	}
	// Given by the source: taken as given, not read.
	q := h.pod("b", 200, meshOn)
	if _, err := h.core.Enroll(ctx, q); err != nil {
		t.Fatal(err)
	}
	if h.opener.addrReads != 2 || !slices.Equal(h.proxy.added["b"].IPs, q.IPs) {
		t.Fatalf("a pod with IPs: %d reads, ztunnel got %v", h.opener.addrReads, h.proxy.added["b"].IPs)
	}
	// Neither given nor on its eth0: refused at the netns step, naming
	// the namespace.
	none := h.pod("c", 300, meshOn)
	none.IPs = nil
	if _, err := h.core.Enroll(ctx, none); FailedStep(err) != StepNetns || !strings.Contains(err.Error(), none.NetnsPath) {
		t.Fatalf("a pod with no IPs anywhere: %v; want a netns failure naming %s", err, none.NetnsPath)
	}
}

// TestEnrollAdoptsCheckpointedIPs: a pod the previous meshlet enrolled, in
// the same namespace, keeps the IPs its record has: nothing is read from
// a namespace whose containers already run.
func TestEnrollAdoptsCheckpointedIPs(t *testing.T) {
	ip := []netip.Addr{netip.MustParseAddr("10.9.9.9")}
	h := newHarness(t, Record{UID: "a", Name: "name-a", Namespace: "default", NetnsInode: 100, IPs: ip,
		Settings: Settings{DNSCapture: true}, Redirection: "fake dns=true"})
	p := h.pod("a", 100, meshOn)
	p.IPs = nil
	if _, err := h.core.Reconcile(ctx, []Pod{p}); err != nil {
		t.Fatal(err)
	}
	if h.opener.addrReads != 0 {
		t.Fatalf("the adopted pod's addresses were read from its namespace %d times", h.opener.addrReads)
	}
	if got := h.proxy.added["a"].IPs; !slices.Equal(got, ip) {
		t.Fatalf("ztunnel got %v, want the checkpoint's %v", got, ip)
	}
}

// TestPodInTheNodesNetnsIsHostNetwork: a pod whose namespace is the node's
// own (CRI-O reports the node's, pinned, for a host-network pod) is decided
// as a host-network pod: skipped, nothing applied, no failure.
func TestPodInTheNodesNetnsIsHostNetwork(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	h.opener.node = map[string]bool{p.NetnsPath: true}
	res, err := h.core.Enroll(ctx, p)
	if err != nil || res.Enrolled || res.Reason != "host-network" {
		t.Fatalf("Enroll = %+v, %v; want skipped as host-network", res, err)
	}
	wantCalls(t, h)
	if st, _ := h.core.Status("a"); st.State != StateSkipped {
		t.Fatalf("state %v, want skipped", st.State)
	}
	// The API server says the pod has a network of its own: a runtime
	// fault, which fails the pod rather than skip it.
	own := false
	h.resolver.hostNetwork = &own
	q := h.pod("b", 200, meshOn)
	h.opener.node[q.NetnsPath] = true
	if _, err := h.core.Enroll(ctx, q); FailedStep(err) != StepNetns || !errors.Is(err, ErrNodeNetns) {
		t.Fatalf("a pod the API server says is not host-network, in the node's namespace: %v; want ErrNodeNetns at the netns step", err)
	}
	wantCalls(t, h)
}
