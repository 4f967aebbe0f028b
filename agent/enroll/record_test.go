package enroll

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSettingsPrecedence: each setting comes from the first source that
// sets it (a claim's, then the pod's annotations), else the node default.
func TestSettingsPrecedence(t *testing.T) {
	cases := []struct {
		name        string
		claim       SettingsOverride
		annotations map[string]string
		want        Settings
	}{
		{"node defaults", SettingsOverride{}, nil, Settings{DNSCapture: true}},
		{"annotation over default", SettingsOverride{}, map[string]string{"dns": "off"}, Settings{}},
		{"claim over annotation", SettingsOverride{DNSCapture: &on}, map[string]string{"dns": "off"}, Settings{DNSCapture: true}},
		{"claim sets one field, default the other", SettingsOverride{BypassInbound: &on}, nil, Settings{DNSCapture: true, BypassInbound: true}},
		{"claim off over default on", SettingsOverride{DNSCapture: &off}, map[string]string{"dns": "on"}, Settings{}},
		{"unusable annotation keeps default", SettingsOverride{}, map[string]string{"dns": "maybe"}, Settings{DNSCapture: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.core.ports.Settings = []SettingsSource{fixedSettings(c.claim), annotationSettings{}}
			p := h.pod("a", 1, meshOn)
			p.Annotations = c.annotations
			if _, err := h.core.Enroll(ctx, p); err != nil {
				t.Fatal(err)
			}
			records, _ := h.core.Records()
			if len(records) != 1 || records[0].Settings != c.want {
				t.Fatalf("records %+v, want one with settings %+v", records, c.want)
			}
		})
	}
}

// TestRecordIsWhatWasEnrolled: the published record carries the pod's
// identity, netns, addresses, settings and the redirector's account, and
// its generation moves exactly when the set of records changes.
func TestRecordIsWhatWasEnrolled(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	p.IPs = []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	_, gen0 := h.core.Records()
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	records, gen1 := h.core.Records()
	want := Record{UID: "a", Name: "name-a", Namespace: "default", ServiceAccount: "sa-name-a", NetnsInode: 100,
		IPs: p.IPs, Settings: Settings{DNSCapture: true}, Redirection: "fake dns=true"}
	if len(records) != 1 || !records[0].sameEnrollment(&want) || records[0].Redirection != want.Redirection {
		t.Fatalf("records %+v, want [%+v]", records, want)
	}
	if gen1 == gen0 {
		t.Fatal("generation did not move when a pod was enrolled")
	}
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, gen := h.core.Records(); gen != gen1 {
		t.Fatal("generation moved on a no-op Enroll")
	}
	if err := h.core.Release(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	if records, gen := h.core.Records(); len(records) != 0 || gen == gen1 {
		t.Fatalf("after release: records %+v, generation moved %t", records, gen != gen1)
	}
}

// TestCheckpointedPodIsAdopted: a pod a previous agent enrolled, back with
// the same netns, addresses and settings, is handed to the redirector with
// its record (once); a pod whose rules would differ is not.
func TestCheckpointedPodIsAdopted(t *testing.T) {
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	prior := func(uid string, inode uint64, dns bool) Record {
		return Record{UID: uid, Name: "name-" + uid, Namespace: "default", ServiceAccount: "old-sa", NetnsInode: inode,
			IPs: ip, Settings: Settings{DNSCapture: dns}, Redirection: "fake dns=" + map[bool]string{true: "true", false: "false"}[dns]}
	}
	h := newHarness(t, prior("same", 1, true), prior("newns", 99, true), prior("newsettings", 3, false), prior("gone", 4, true))
	var pods []Pod
	for i, uid := range []string{"same", "newns", "newsettings"} {
		p := h.pod(uid, uint64(i+1), meshOn)
		p.IPs = ip
		pods = append(pods, p)
	}
	inherited := func(uid string) bool {
		h.core.mu.RLock()
		defer h.core.mu.RUnlock()
		return h.core.checkpointed[uid] != nil
	}
	for uid, want := range map[string]bool{"same": true, "gone": true, "never": false} {
		if got := inherited(uid); got != want {
			t.Errorf("before Reconcile: inherited(%s) = %v, want %v", uid, got, want)
		}
	}
	if _, err := h.core.Reconcile(ctx, pods); err != nil {
		t.Fatal(err)
	}
	// Claimed by their pods, or dropped (gone): no record is left over.
	for _, uid := range []string{"same", "newns", "gone"} {
		if inherited(uid) {
			t.Errorf("after Reconcile: inherited(%s) = true, want false", uid)
		}
	}
	got := h.rec.take()
	slices.Sort(got)
	// The pod that is gone leaves the proxy, which the previous agent had
	// handed it.
	want := []string{
		"add newns inode=2 sa=sa-name-newns", "add newsettings inode=3 sa=sa-name-newsettings", "add same inode=1 sa=sa-name-same",
		"adopt same inode=1", "apply newns inode=2 dns=true", "apply newsettings inode=3 dns=true", "del gone",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("calls\n got  %q\n want %q", got, want)
	}
	// The record is used once: a later change re-applies from scratch.
	if err := h.core.Release(ctx, "same", ""); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	if _, err := h.core.Enroll(ctx, pods[0]); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "apply same inode=1 dns=true", "add same inode=1 sa=sa-name-same")
	// The pod that is gone is not adopted later under the same UID.
	gone := h.pod("gone", 4, meshOn)
	gone.IPs = ip
	if _, err := h.core.Enroll(ctx, gone); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "apply gone inode=4 dns=true", "add gone inode=4 sa=sa-name-gone")
}

// TestDeadlineBoundsTheEnrollment: once the caller's deadline has passed,
// no further step starts; the enrollment fails at the step it did not
// reach, rolls back and names the cause.
func TestDeadlineBoundsTheEnrollment(t *testing.T) {
	cause := errors.New("enrollment exceeded --enroll-timeout")
	h := newHarness(t)
	var cancel context.CancelCauseFunc
	h.redir.hook = func(string) { cancel(cause) } // Apply runs past the deadline
	cctx, c := context.WithCancelCause(ctx)
	cancel = c
	res, err := h.core.Enroll(cctx, h.pod("a", 100, meshOn))
	if res.Enrolled || FailedStep(err) != StepProxy || !errors.Is(err, ErrOutOfTime) || !errors.Is(err, cause) {
		t.Fatalf("Enroll = %+v, %v; want a ztunnel-step failure, out of time, with the cause", res, err)
	}
	// The Add never started; the rules that went in came out again.
	wantCalls(t, h, "apply a inode=100 dns=true", "remove a inode=100 scope=all")
	if h.opener.openCount() != 0 || h.redir.has("a") {
		t.Fatal("a timed-out enrollment left a netns held or rules behind")
	}

	// A deadline that passed during resolve: nothing is changed, the
	// netns is not kept.
	h.redir.hook = nil
	done, c2 := context.WithCancelCause(ctx)
	c2(cause)
	if _, err := h.core.Enroll(done, h.pod("b", 200, meshOn)); FailedStep(err) != StepRedirect || !errors.Is(err, cause) {
		t.Fatalf("Enroll after the deadline = %v, want a redirect-step failure with the cause", err)
	}
	wantCalls(t, h)
	if h.opener.openCount() != 0 {
		t.Fatal("a timed-out enrollment kept a netns open")
	}

	// An enrolled pod found unchanged needs no time: the fail-closed gate
	// (a late CreateContainer) must not refuse it.
	podC := h.pod("c", 300, meshOn)
	if _, err := h.core.Enroll(ctx, podC); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	if res, err := h.core.Enroll(done, podC); err != nil || !res.Enrolled {
		t.Fatalf("no-op Enroll after the deadline = %+v, %v; want enrolled", res, err)
	}

	// The deadline passes while the previous enrollment is released (new
	// netns): the new one is not applied, and its netns is not kept.
	late, cancelLate := context.WithCancelCause(ctx)
	h.proxy.onDel = func() { cancelLate(cause) }
	if _, err := h.core.Enroll(late, h.pod("c", 301, meshOn)); FailedStep(err) != StepRedirect || !errors.Is(err, cause) {
		t.Fatalf("Enroll timing out during the release = %v, want a redirect-step failure", err)
	}
	h.proxy.onDel = nil
	wantCalls(t, h, "del c", "remove c inode=300 scope=host")
	wantState(t, h, "c", StateFailed, "redirect")
	if h.opener.openCount() != 0 {
		t.Fatalf("%d netns held after the timed-out re-enrollment, want none", h.opener.openCount())
	}

	// Pods that already run (Reconcile) are not cut short between steps.
	if _, err := h.core.Reconcile(done, []Pod{h.pod("d", 400, meshOn)}); err != nil {
		t.Fatalf("Reconcile with the deadline passed: %v", err)
	}
	wantState(t, h, "d", StateEnrolled, "")
}

// TestReadersDoNotWaitForAPod: status, the pod list and the records are
// read while an enrollment holds the pod's lock (a hook in progress).
func TestReadersDoNotWaitForAPod(t *testing.T) {
	h := newHarness(t)
	if _, err := h.core.Enroll(ctx, h.pod("a", 1, meshOn)); err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	h.redir.hook = func(uid string) {
		if uid == "b" {
			close(inside)
			<-release
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.core.Enroll(ctx, h.pod("b", 2, meshOn))
		done <- err
	}()
	<-inside
	read := make(chan string, 1)
	go func() {
		st, _ := h.core.Status("b")
		records, _ := h.core.Records()
		read <- st.State.String() + " " + strings.Repeat("r", len(records)) + " " + strings.Repeat("p", len(h.core.Pods()))
	}()
	select {
	case got := <-read:
		if got != "pending r pp" {
			t.Fatalf("read %q while b is being enrolled, want b pending, one record (a), two pods", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("readers waited for the pod's lock")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if records, _ := h.core.Records(); len(records) != 2 {
		t.Fatalf("%d records after both enrolled, want 2", len(records))
	}
}

// TestRedirectionStatusNames: the names are what istiod reads in the pod's
// ambient.istio.io/redirection annotation.
func TestRedirectionStatusNames(t *testing.T) {
	for st, want := range map[RedirectionStatus]string{
		RedirectionPending: "pending", RedirectionEnabled: "enabled", RedirectionRemoved: "removed",
	} {
		if got := st.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(st), got, want)
		}
	}
}

// TestAdoptionSkipsTheIPCheck: a running pod the previous agent enrolled
// in the same sandbox and namespace (its ID, inode and cookie) is adopted
// even if the namespace does not hold its IPs (failing it would leave that
// agent's rules with no ztunnel that knows the pod). A record that does not
// prove it is that namespace is checked as a new pod is, and refused: one
// an older meshlet wrote (no sandbox ID), one of another sandbox or cookie
// whose inode the kernel gave to a later namespace.
func TestAdoptionSkipsTheIPCheck(t *testing.T) {
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	record := func(uid, sandbox string, inode, cookie uint64) Record {
		return Record{UID: uid, SandboxID: sandbox, Name: "name-" + uid, Namespace: "default", NetnsInode: inode, NetnsCookie: cookie,
			IPs: ip, Settings: Settings{DNSCapture: true}, Redirection: "fake dns=true"}
	}
	h := newHarness(t, record("kept", "sb-kept", 1, 1<<32+1), record("legacy", "", 2, 0),
		record("recycled", "sb-old", 3, 1<<32+3), record("recookied", "sb-same", 4, 7))
	var pods []Pod
	for _, p := range []struct {
		uid, sandbox string
		inode        uint64
	}{{"kept", "sb-kept", 1}, {"legacy", "sb-legacy", 2}, {"recycled", "sb-new", 3}, {"recookied", "sb-same", 4}} {
		pod := h.sandbox(p.uid, p.sandbox, p.inode, meshOn)
		pod.IPs = ip
		h.opener.withoutIPs[pod.NetnsPath] = true
		pods = append(pods, pod)
	}
	if _, err := h.core.Reconcile(ctx, pods); err == nil {
		t.Fatal("Reconcile adopted every pod, want those it cannot prove refused")
	}
	wantState(t, h, "kept", StateEnrolled, "pod-label")
	for _, uid := range []string{"legacy", "recycled", "recookied"} {
		if st, _ := h.core.Status(uid); st.State != StateFailed || !strings.Contains(st.Reason, "not assigned") {
			t.Errorf("pod %s: %s (%s), want failed at the address check", uid, st.State, st.Reason)
		}
	}
	fresh := h.pod("fresh", 5, meshOn)
	fresh.IPs = ip
	h.opener.withoutIPs[fresh.NetnsPath] = true
	if _, err := h.core.Enroll(ctx, fresh); FailedStep(err) != StepNetns {
		t.Fatalf("enrolling a new pod whose namespace lacks its IPs: %v, want a netns failure", err)
	}
}

// TestInheritedPodsLeaveTheProxy: a pod the previous agent handed to the
// proxy (its checkpointed record) and this one never takes over is
// dropped by the proxy when it leaves: gone at the first listing, no
// longer selected, or stopped. One whose rules could not be applied stays
// with the proxy as the previous agent left it until then. Listed closes
// with the first Reconcile.
func TestInheritedPodsLeaveTheProxy(t *testing.T) {
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	prior := func(uid string, inode uint64) Record {
		return Record{UID: uid, Name: "name-" + uid, Namespace: "default", NetnsInode: inode,
			IPs: ip, Settings: Settings{DNSCapture: true}, Redirection: "fake dns=true"}
	}
	h := newHarness(t, prior("gone", 1), prior("optedout", 2), prior("adopted", 3), prior("failing", 4))
	select {
	case <-h.core.Listed():
		t.Fatal("Listed closed before any Reconcile")
	default:
	}
	h.redir.failApply = errors.New("nft: no buffer space")
	failing := h.pod("failing", 4, meshOn)
	failing.IPs = ip
	if _, err := h.core.Enroll(ctx, failing); err == nil {
		t.Fatal("Enroll with a failing redirector succeeded")
	}
	h.redir.failApply = nil
	if got := h.rec.take(); slices.Contains(got, "del failing") {
		t.Fatalf("a pod whose rules could not be rewritten was dropped by the proxy: %q", got)
	}
	if err := h.core.Release(ctx, "failing", ""); err != nil {
		t.Fatal(err)
	}
	if got := h.rec.take(); !slices.Equal(got, []string{"del failing"}) {
		t.Fatalf("stopping a pod never taken over: calls %q, want its del", got)
	}

	optedOut := h.pod("optedout", 2, nil)
	optedOut.IPs = ip
	adopted := h.pod("adopted", 3, meshOn)
	adopted.IPs = ip
	if _, err := h.core.Reconcile(ctx, []Pod{optedOut, adopted}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.core.Listed():
	default:
		t.Fatal("Listed not closed after the first Reconcile")
	}
	got := h.rec.take()
	slices.Sort(got)
	want := []string{"add adopted inode=3 sa=sa-name-adopted", "adopt adopted inode=3", "del gone", "del optedout", "remove optedout inode=2 scope=all"}
	if !slices.Equal(got, want) {
		t.Fatalf("calls\n got  %q\n want %q", got, want)
	}
}

// TestHookBehindABusyPodAnswersInTime: a runtime hook that finds another
// operation running on its pod (an enrollment blocked in the redirector)
// refuses within its own deadline, having changed nothing; a stop that
// cannot wait is done once that operation ends.
func TestHookBehindABusyPodAnswersInTime(t *testing.T) {
	h := newHarness(t)
	inApply, unblock := make(chan struct{}), make(chan struct{})
	h.redir.hook = func(uid string) {
		if uid == "busy" {
			close(inApply)
			<-unblock
		}
	}
	p := h.pod("busy", 1, meshOn)
	running := make(chan error, 1)
	go func() {
		_, err := h.core.EnrollRunning(ctx, p)
		running <- err
	}()
	<-inApply
	hookCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := h.core.Enroll(hookCtx, p)
	if !errors.Is(err, ErrOutOfTime) || FailedStep(err) != StepResolve || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enroll behind a busy pod = %v, want out of time before resolve, with the deadline", err)
	}
	stopCtx, cancelStop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelStop()
	if err := h.core.Release(stopCtx, "busy", ""); !errors.Is(err, ErrOutOfTime) || !strings.Contains(err.Error(), "deferred") {
		t.Fatalf("Release behind a busy pod = %v, want it deferred", err)
	}
	select {
	case err := <-running:
		t.Fatalf("the operation ahead ended (%v) before it was unblocked: the hooks waited for it", err)
	default:
	}
	close(unblock)
	if err := <-running; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if st, _ := h.core.Status("busy"); st.State == StateReleased {
			break
		}
		if time.Now().After(deadline) {
			st, _ := h.core.Status("busy")
			t.Fatalf("the deferred release never ran: pod %s", st.State)
		}
		time.Sleep(time.Millisecond)
	}
	if h.proxy.uids()["busy"] {
		t.Fatal("the released pod is still at the proxy")
	}
}

// unknownResolver says nothing it knows: the API server is unreachable.
type unknownResolver struct{}

func (unknownResolver) Resolve(context.Context, *Pod) (PodInfo, error) {
	return PodInfo{ServiceAccount: DefaultServiceAccount, Unknown: true}, nil
}

// TestHeldPodKeptWhileTheSourceCannotSay: restarted while the API server
// is down, meshlet cannot see the namespace label that selected a pod; the
// pod the previous meshlet meshed is adopted as it was (its service
// account included), not taken out of the mesh, and a pod it never held
// is decided from what is known.
func TestHeldPodKeptWhileTheSourceCannotSay(t *testing.T) {
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	h := newHarness(t, Record{UID: "held", Name: "name-held", Namespace: "default", ServiceAccount: "reviews", NetnsInode: 1,
		IPs: ip, Settings: Settings{DNSCapture: true}, Redirection: "fake dns=true"})
	h.core.ports.Resolver = unknownResolver{}
	held := h.pod("held", 1, nil) // selected by its namespace's label, which nobody can read now
	held.IPs = ip
	other := h.pod("other", 2, nil)
	if _, err := h.core.Reconcile(ctx, []Pod{held, other}); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.core.Status("held"); st.State != StateEnrolled || st.Reason != ReasonKeptUnknown {
		t.Fatalf("held pod: %s (%s), want enrolled, %s", st.State, st.Reason, ReasonKeptUnknown)
	}
	if r, _ := h.core.Record("held"); r.ServiceAccount != "reviews" {
		t.Fatalf("held pod's record has service account %q, want the one it was meshed with", r.ServiceAccount)
	}
	if st, _ := h.core.Status("other"); st.State != StateSkipped {
		t.Fatalf("a pod never meshed: %s, want skipped", st.State)
	}
	got := h.rec.take()
	slices.Sort(got)
	if want := []string{"add held inode=1 sa=reviews", "adopt held inode=1", "remove other inode=2 scope=all"}; !slices.Equal(got, want) {
		t.Fatalf("calls\n got  %q\n want %q", got, want)
	}
}

// TestFailedRewriteLeavesNothingBehind: a pod re-programmed inside a hook
// while no ztunnel is connected stays in the mesh (the proxy has it in
// this netns; its new workload is registered for the next connection).
// A pod whose new rules go in but whose new workload the proxy link
// cannot take is out of the mesh: its rules rolled back, and the proxy
// told to drop it, whether it was this agent's (re-programmed) or the
// previous agent's (adopted).
func TestFailedRewriteLeavesNothingBehind(t *testing.T) {
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	h := newHarness(t, Record{UID: "inherited", Name: "name-inherited", Namespace: "default", NetnsInode: 2,
		IPs: ip, Settings: Settings{DNSCapture: false}, Redirection: "fake dns=false"})
	p := h.pod("a", 1, meshOn)
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	h.proxy.mu.Lock()
	h.proxy.disconnected = true
	h.proxy.mu.Unlock()
	p.Annotations = map[string]string{"dns": "off"}
	if _, err := h.core.Enroll(ctx, p); err != nil {
		t.Fatalf("re-programming a running pod with no ztunnel connected = %v, want it done", err)
	}
	wantCalls(t, h, "apply a inode=1 dns=false", "add a inode=1 sa=sa-name-a")
	wantState(t, h, "a", StateEnrolled, "pod-label")
	h.proxy.mu.Lock()
	h.proxy.disconnected = false
	h.proxy.mu.Unlock()

	h.proxy.failAdd = errors.New("cannot pass the netns on")
	p.Annotations = map[string]string{"dns": "on"}
	if _, err := h.core.Enroll(ctx, p); FailedStep(err) != StepProxy {
		t.Fatalf("Enroll = %v, want a ztunnel failure", err)
	}
	wantCalls(t, h, "apply a inode=1 dns=true", "add a inode=1 sa=sa-name-a",
		"remove a inode=1 scope=all", "del a")

	// Settings that differ from the checkpoint's: its rules are rewritten.
	inherited := h.pod("inherited", 2, meshOn)
	inherited.IPs = ip
	if _, err := h.core.Enroll(ctx, inherited); FailedStep(err) != StepProxy {
		t.Fatalf("Enroll = %v, want a ztunnel failure", err)
	}
	wantCalls(t, h, "apply inherited inode=2 dns=true", "add inherited inode=2 sa=sa-name-inherited",
		"remove inherited inode=2 scope=all", "del inherited")
}

// TestSkippedAfterAFailedAdoption: a pod whose adoption failed keeps the
// previous agent's rules and handover; when policy then leaves it out, both
// go.
func TestSkippedAfterAFailedAdoption(t *testing.T) {
	ip := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	h := newHarness(t, Record{UID: "p", Name: "name-p", Namespace: "default", NetnsInode: 1,
		IPs: ip, Settings: Settings{DNSCapture: true}, Redirection: "fake dns=true"})
	h.resolver.setNamespace("default", meshOn)
	p := h.pod("p", 1, nil)
	p.IPs = ip
	h.resolver.mu.Lock()
	h.resolver.err = errors.New("API server unreachable")
	h.resolver.mu.Unlock()
	if _, err := h.core.Reconcile(ctx, []Pod{p}); err == nil {
		t.Fatal("Reconcile with a failing resolver succeeded")
	}
	if got := h.rec.take(); len(got) != 0 {
		t.Fatalf("a failed adoption changed %q", got)
	}
	h.resolver.mu.Lock()
	h.resolver.err = nil
	h.resolver.mu.Unlock()
	h.resolver.setNamespace("default", nil) // no longer selected
	if err := h.core.Reevaluate(ctx); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, h, "remove p inode=1 scope=all", "del p")
}

// TestFailedIdentityChangeRemovesTheRules: a running pod the redirector
// would refuse now (IPv6-only, IPv6 off) whose identity changed is
// released from the proxy, and its rules kept for the new identity; when
// keeping them fails, no proxy serves the pod, so its rules go too (they
// would blackhole its traffic).
func TestFailedIdentityChangeRemovesTheRules(t *testing.T) {
	h := newHarness(t)
	p := h.pod("a", 100, meshOn)
	if _, err := h.core.EnrollRunning(ctx, p); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	h.redir.setNode(" ipv6=false", errors.New("pod has only IPv6 addresses"))
	h.redir.setFailApply(errors.New("boom"))
	p.Name = "renamed"
	if _, err := h.core.EnrollRunning(ctx, p); FailedStep(err) != StepRedirect {
		t.Fatalf("EnrollRunning = %v, want a redirect failure", err)
	}
	wantCalls(t, h, "del a", "remove a inode=100 scope=host", "keep a inode=100", "remove a inode=100 scope=all")
	if h.redir.has("a") || h.proxy.uids()["a"] {
		t.Fatalf("after the failed identity change: rules %t, at the proxy %t; want neither", h.redir.has("a"), h.proxy.uids()["a"])
	}
	if st := wantState(t, h, "a", StateFailed, "boom"); st.Retries != 1 {
		t.Fatalf("status %+v, want a retry pending", st)
	}
}
