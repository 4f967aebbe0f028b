package cnifallback

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/enroll"
)

// The kernel-facing parts are tested for real elsewhere (the chain in
// cnifallback/chaintest, CNI mode end to end in test/e2e); here fakes of
// the core and the runtime's list pin down which pods a listing forgets
// and enrolls while ADDs and DELs are served.

type fakeCore struct {
	mu           sync.Mutex
	known        map[string]enroll.PodStatus
	checkpointed map[string]string // UID → the sandbox of the previous meshlet's record
	enrolled     []string
	forgotten    []string
	reconciled   [][]enroll.Pod
	enrollErr    error
	// during, if set, runs inside EnrollRunning (a DEL arriving meanwhile).
	during func()
}

func newFakeCore(uids ...string) *fakeCore {
	c := &fakeCore{known: map[string]enroll.PodStatus{}}
	for _, u := range uids {
		c.known[u] = enroll.PodStatus{UID: u, State: enroll.StateEnrolled, Since: time.Unix(0, 0)}
	}
	return c
}

func (c *fakeCore) Enroll(_ context.Context, p enroll.Pod) (enroll.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.enrolled = append(c.enrolled, p.UID)
	if c.enrollErr != nil {
		c.known[p.UID] = enroll.PodStatus{UID: p.UID, SandboxID: p.SandboxID, State: enroll.StateFailed, Since: time.Now()}
		return enroll.Result{}, c.enrollErr
	}
	c.known[p.UID] = enroll.PodStatus{UID: p.UID, SandboxID: p.SandboxID, State: enroll.StateEnrolled, Since: time.Now()}
	return enroll.Result{Enrolled: true, Changed: true}, nil
}

func (c *fakeCore) EnrollRunning(ctx context.Context, p enroll.Pod) (enroll.Result, error) {
	if c.during != nil {
		c.during()
	}
	return c.Enroll(ctx, p)
}

func (c *fakeCore) Forget(_ context.Context, uid, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgotten = append(c.forgotten, uid)
	delete(c.known, uid)
	return nil
}

func (c *fakeCore) ForgetUnchanged(ctx context.Context, st enroll.PodStatus) (bool, error) {
	c.mu.Lock()
	now, ok := c.known[st.UID]
	c.mu.Unlock()
	if !ok || now.State != st.State || !now.Since.Equal(st.Since) {
		return false, nil
	}
	return true, c.Forget(ctx, st.UID, "")
}

func (c *fakeCore) Reconcile(_ context.Context, pods []enroll.Pod) ([]enroll.Pod, error) {
	var late []enroll.Pod
	for _, p := range pods {
		if !c.Holds(p.UID, p.SandboxID) {
			late = append(late, p)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconciled = append(c.reconciled, pods)
	for _, p := range pods {
		c.known[p.UID] = enroll.PodStatus{UID: p.UID, SandboxID: p.SandboxID, State: enroll.StateEnrolled}
	}
	return late, nil
}

func (c *fakeCore) Status(uid string) (enroll.PodStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.known[uid]
	return s, ok
}

// Holds is the core's rule (enroll's TestReconcileReportsLateEnrollments).
func (c *fakeCore) Holds(uid, sandboxID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.known[uid]; ok && st.State == enroll.StateEnrolled && enroll.SameSandbox(st.SandboxID, sandboxID) {
		return true
	}
	cp, ok := c.checkpointed[uid]
	return ok && enroll.SameSandbox(cp, sandboxID)
}

func (c *fakeCore) Pods() []enroll.PodStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []enroll.PodStatus
	for _, s := range c.known {
		out = append(out, s)
	}
	return out
}

// fakeList is a listing of the runtime's pods.
type fakeList struct {
	pods       []enroll.Pod
	unreadable []string
}

func (l *fakeList) RunningPods(context.Context) ([]enroll.Pod, []string, error) {
	if len(l.unreadable) > 0 {
		return l.pods, l.unreadable, errors.New("some sandboxes cannot be read")
	}
	return l.pods, nil, nil
}

func (l *fakeList) Close() error                    { return nil }
func (l *fakeList) Runtime() (name, version string) { return "containerd", "v2.4.2" }

func pods(uids ...string) *fakeList {
	l := &fakeList{pods: []enroll.Pod{}}
	for _, u := range uids {
		l.pods = append(l.pods, enroll.Pod{UID: u, SandboxID: "sb-" + u, Name: u, Namespace: "ns", NetnsPath: "/run/netns/" + u})
	}
	return l
}

type fakeMetrics struct {
	mu           sync.Mutex
	late, missed int
}

func (m *fakeMetrics) Enrolled(enroll.PodRef, time.Duration, error) {}
func (m *fakeMetrics) LateEnrolled(n int)                           { m.mu.Lock(); m.late += n; m.mu.Unlock() }
func (m *fakeMetrics) MissedRemovals(n int)                         { m.mu.Lock(); m.missed += n; m.mu.Unlock() }
func (m *fakeMetrics) Connected(bool)                               {}

func TestResyncForgetsPodsMissingForTheGrace(t *testing.T) {
	core := newFakeCore("a", "b")
	m := &fakeMetrics{}
	f := New(DefaultConfig(), Deps{Core: core, Metrics: m})
	grace := f.missingGrace()
	ctx := context.Background()
	t0 := time.Now()

	// b may be a pod whose ADD just finished: its sandbox is not ready,
	// so not listed, yet.
	f.recon.Pass(ctx, pods("a"), t0)
	f.recon.Pass(ctx, pods("a"), t0.Add(grace/2))
	if len(core.forgotten) != 0 {
		t.Fatalf("b missing for less than %v was forgotten: %v", grace, core.forgotten)
	}
	f.recon.Pass(ctx, pods("a"), t0.Add(grace))
	if !slices.Equal(core.forgotten, []string{"b"}) {
		t.Fatalf("forgotten %v after b was missing for %v, want [b]", core.forgotten, grace)
	}
	if m.missed != 1 {
		t.Fatalf("missed removals counted %d, want 1 (b)", m.missed)
	}

	// Listed again in between: the count starts over.
	core = newFakeCore("c")
	f = New(DefaultConfig(), Deps{Core: core, Metrics: &fakeMetrics{}})
	f.recon.Pass(ctx, pods(), t0)
	f.recon.Pass(ctx, pods("c"), t0.Add(grace/2))
	f.recon.Pass(ctx, pods(), t0.Add(grace))
	if len(core.forgotten) != 0 {
		t.Fatalf("forgotten %v: c was listed while it was missing", core.forgotten)
	}

	// A new sandbox of the pod enrolled by an ADD while it was missing:
	// its state changed since, so it is not forgotten.
	core = newFakeCore("d")
	f = New(DefaultConfig(), Deps{Core: core, Metrics: &fakeMetrics{}})
	f.recon.Pass(ctx, pods(), t0)
	core.known["d"] = enroll.PodStatus{UID: "d", State: enroll.StateEnrolled, Since: t0.Add(time.Second)}
	f.recon.Pass(ctx, pods(), t0.Add(grace))
	if len(core.forgotten) != 0 {
		t.Fatalf("forgotten %v: d was enrolled again after it went missing", core.forgotten)
	}

	// A running pod the runtime could not read is present, not missing.
	core = newFakeCore("e")
	f = New(DefaultConfig(), Deps{Core: core, Metrics: &fakeMetrics{}})
	unreadable := &fakeList{pods: []enroll.Pod{}, unreadable: []string{"e"}}
	f.recon.Pass(ctx, unreadable, t0)
	f.recon.Pass(ctx, unreadable, t0.Add(2*grace))
	if len(core.forgotten) != 0 || len(core.enrolled) != 0 {
		t.Fatalf("a pod the runtime could not read was forgotten (%v) or enrolled (%v)", core.forgotten, core.enrolled)
	}
}

func TestResyncEnrollsPodsThatStartedOutsideTheChain(t *testing.T) {
	core := newFakeCore("a")
	m := &fakeMetrics{}
	f := New(DefaultConfig(), Deps{Core: core, Metrics: m})
	ctx := context.Background()
	// d's DEL was served; its sandbox is still listed while it stops.
	// The DEL of a replaced sandbox of late does not hold back the
	// sandbox it runs in.
	must(t, tombstoning{f}.Forget(ctx, "d", "sb-d"))
	must(t, tombstoning{f}.Forget(ctx, "late", "sb-late-replaced"))
	f.recon.Pass(ctx, pods("a", "late", "d"), time.Now())
	if !slices.Equal(core.enrolled, []string{"late"}) || m.late != 1 {
		t.Fatalf("enrolled %v (late %d), want [late] counted once: a is known, d was deleted", core.enrolled, m.late)
	}
	// The runtime sets d's sandbox up again (its ADD): the tombstone goes.
	_, err := tombstoning{f}.Enroll(ctx, enroll.Pod{UID: "d", SandboxID: "sb-d"})
	must(t, err)
	if _, deleted := f.deleted["sb-d"]; deleted {
		t.Fatal("an ADD for d kept its DEL's tombstone")
	}
}

func TestResyncRetriesFailedEnrollments(t *testing.T) {
	core := newFakeCore()
	m := &fakeMetrics{}
	f := New(DefaultConfig(), Deps{Core: core, Metrics: m})
	ctx := context.Background()
	core.enrollErr = errors.New("no ztunnel")
	f.recon.Pass(ctx, pods("late"), time.Now())
	if st, _ := core.Status("late"); st.State != enroll.StateFailed || m.late != 0 {
		t.Fatalf("state %v, late %d after a failed late enrollment", st.State, m.late)
	}
	core.enrollErr = nil
	f.recon.Pass(ctx, pods("late"), time.Now())
	if st, _ := core.Status("late"); st.State != enroll.StateEnrolled || m.late != 1 || len(core.enrolled) != 2 {
		t.Fatalf("state %v, late %d, enrolled %v: a failed pod must be tried again at the next listing", st.State, m.late, core.enrolled)
	}
}

// TestResyncLeavesANewerSandbox: a listing taken before the kubelet
// re-created a pod's sandbox names the old one; the new sandbox's ADD,
// served after the listing, failed. The listing does not put the pod back
// in its old sandbox: the next listing names the new one, and retries it.
func TestResyncLeavesANewerSandbox(t *testing.T) {
	core := newFakeCore()
	f := New(DefaultConfig(), Deps{Core: core, Metrics: &fakeMetrics{}})
	ctx := context.Background()
	listedAt := time.Now()
	core.known["p"] = enroll.PodStatus{UID: "p", SandboxID: "sb-new", State: enroll.StateFailed, Since: listedAt.Add(time.Millisecond)}
	f.recon.Pass(ctx, pods("p"), listedAt) // names sb-p, the old sandbox
	if len(core.enrolled) != 0 {
		t.Fatalf("enrolled %v from a listing older than the pod's new sandbox, want none", core.enrolled)
	}
	newer := pods()
	newer.pods = append(newer.pods, enroll.Pod{UID: "p", SandboxID: "sb-new", Name: "p", Namespace: "ns", NetnsPath: "/run/netns/new"})
	f.recon.Pass(ctx, newer, time.Now())
	if !slices.Equal(core.enrolled, []string{"p"}) {
		t.Fatalf("enrolled %v from a listing of the new sandbox, want [p]", core.enrolled)
	}
}

func TestResyncForgetsAPodDeletedDuringItsLateEnrollment(t *testing.T) {
	core := newFakeCore()
	f := New(DefaultConfig(), Deps{Core: core, Metrics: &fakeMetrics{}})
	ctx := context.Background()
	core.during = func() { must(t, tombstoning{f}.Forget(ctx, "going", "sb-going")) }
	f.recon.Pass(ctx, pods("going"), time.Now())
	if _, known := core.Status("going"); known {
		t.Fatal("a pod whose DEL was served during its late enrollment stayed enrolled")
	}
}

func TestSyncAtStartReconcilesAndCountsLatePods(t *testing.T) {
	core := newFakeCore("enrolled")
	// Enrolled by the previous meshlet: adopted now, not late; unless the
	// sandbox it enrolled is not the one that runs now.
	core.checkpointed = map[string]string{"adopted": "sb-adopted", "replaced": "sb-before"}
	m := &fakeMetrics{}
	after := false
	f := New(DefaultConfig(), Deps{Core: core, Metrics: m, AfterSync: func(context.Context) { after = true }})
	must(t, f.syncAtStart(context.Background(), pods("enrolled", "adopted", "new", "replaced")))
	if len(core.reconciled) != 1 || len(core.reconciled[0]) != 4 {
		t.Fatalf("reconciled %v, want the four listed pods once", core.reconciled)
	}
	if m.late != 2 || !after {
		t.Fatalf("late %d (want 2: new, and replaced in another sandbox than its record's), AfterSync ran %v", m.late, after)
	}
}

type fakeInstaller struct {
	err       error
	installed bool
}

func (i *fakeInstaller) Run(ctx context.Context) error {
	if i.err != nil {
		return i.err
	}
	<-ctx.Done()
	return nil
}
func (i *fakeInstaller) Installed() bool { return i.installed }

func TestRunStopsWithTheInstallersFailure(t *testing.T) {
	boom := errors.New("conf dir unreadable")
	f := New(DefaultConfig(), Deps{Core: newFakeCore(), Metrics: &fakeMetrics{}, Installer: &fakeInstaller{err: boom},
		DialRuntime: func(ctx context.Context) (cri.Listing, error) {
			<-ctx.Done() // the runtime never answers
			return nil, ctx.Err()
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Run(ctx); !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want the installer's failure", err)
	}
	if f.Connected() {
		t.Fatal("Connected after Run failed")
	}
}

func TestRunFailsWithoutItsSocket(t *testing.T) {
	// A directory where the socket should be: Listen fails, and Run must
	// return that error (not hang on its background work).
	cfg := DefaultConfig()
	cfg.Socket = t.TempDir()
	f := New(cfg, Deps{Core: newFakeCore(), Metrics: &fakeMetrics{}, Installer: &fakeInstaller{installed: true},
		DialRuntime: func(context.Context) (cri.Listing, error) { return pods(), nil }})
	done := make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), cfg.Socket) {
			t.Fatalf("Run = %v, want the socket's error naming %s", err, cfg.Socket)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its socket failed")
	}
}

func TestRunStopsCleanly(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Socket = filepath.Join(t.TempDir(), "cni.sock")
	f := New(cfg, Deps{Core: newFakeCore(), Metrics: &fakeMetrics{}, Installer: &fakeInstaller{installed: true},
		DialRuntime: func(context.Context) (cri.Listing, error) { return pods(), nil }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !f.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("not serving after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after a stop = %v, want nil", err)
	}
	if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
