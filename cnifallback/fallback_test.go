package cnifallback

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
)

// The kernel-facing parts are tested for real elsewhere (the chain in
// cnifallback/chaintest, CNI mode end to end in test/e2e); here fakes of
// the core and the runtime's list pin down which pods a listing forgets
// and enrolls while ADDs and DELs are served.

type fakeCore struct {
	mu           sync.Mutex
	known        map[string]enroll.PodStatus
	checkpointed map[string]bool
	enrolled     []string
	forgotten    []string
	reconciled   [][]enroll.Pod
}

func newFakeCore(uids ...string) *fakeCore {
	c := &fakeCore{known: map[string]enroll.PodStatus{}}
	for _, u := range uids {
		c.known[u] = enroll.PodStatus{UID: u, State: enroll.StateEnrolled}
	}
	return c
}

func (c *fakeCore) Enroll(_ context.Context, p enroll.Pod) (enroll.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.enrolled = append(c.enrolled, p.UID)
	c.known[p.UID] = enroll.PodStatus{UID: p.UID, State: enroll.StateEnrolled}
	return enroll.Result{Enrolled: true, Changed: true}, nil
}

func (c *fakeCore) Forget(_ context.Context, uid string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgotten = append(c.forgotten, uid)
	delete(c.known, uid)
	return nil
}

func (c *fakeCore) Reconcile(_ context.Context, pods []enroll.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconciled = append(c.reconciled, pods)
	for _, p := range pods {
		c.known[p.UID] = enroll.PodStatus{UID: p.UID, State: enroll.StateEnrolled}
	}
	return nil
}

func (c *fakeCore) Status(uid string) (enroll.PodStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.known[uid]
	return s, ok
}

func (c *fakeCore) Checkpointed(uid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkpointed[uid]
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

type fakeList []enroll.Pod

func (l *fakeList) RunningPods(context.Context) ([]enroll.Pod, error) { return *l, nil }

func pods(uids ...string) fakeList {
	var out fakeList
	for _, u := range uids {
		out = append(out, enroll.Pod{UID: u, Name: u, Namespace: "ns", NetnsPath: "/run/netns/" + u})
	}
	return out
}

type fakeMetrics struct {
	mu   sync.Mutex
	late int
}

func (m *fakeMetrics) Enrolled(enroll.PodRef, time.Duration, error) {}
func (m *fakeMetrics) LateEnrolled(n int)                           { m.mu.Lock(); m.late += n; m.mu.Unlock() }
func (m *fakeMetrics) Connected(bool)                               {}

func TestResyncForgetsOnlyPodsMissingTwice(t *testing.T) {
	core := newFakeCore("a", "b")
	list := pods("a")
	f := New(DefaultConfig(), Deps{Core: core, Metrics: &fakeMetrics{}})
	ctx := context.Background()

	// b may be a pod whose ADD just finished: its sandbox is not ready,
	// so not listed, yet.
	f.resync(ctx, &list)
	if len(core.forgotten) != 0 {
		t.Fatalf("one listing without b forgot %v; a pod is forgotten only when two listings in a row miss it", core.forgotten)
	}
	f.resync(ctx, &list)
	if !slices.Equal(core.forgotten, []string{"b"}) {
		t.Fatalf("forgotten %v after two listings without b, want [b]", core.forgotten)
	}

	// Listed again in between: the count starts over.
	core = newFakeCore("c")
	f = New(DefaultConfig(), Deps{Core: core, Metrics: &fakeMetrics{}})
	empty, withC := pods(), pods("c")
	f.resync(ctx, &empty)
	f.resync(ctx, &withC)
	f.resync(ctx, &empty)
	if len(core.forgotten) != 0 {
		t.Fatalf("forgotten %v: c was listed between the two listings that missed it", core.forgotten)
	}
}

func TestResyncEnrollsPodsThatStartedOutsideTheChain(t *testing.T) {
	core := newFakeCore("a")
	m := &fakeMetrics{}
	f := New(DefaultConfig(), Deps{Core: core, Metrics: m})
	ctx := context.Background()
	// d's DEL was served; its sandbox is still listed while it stops.
	must(t, tombstoning{f}.Forget(ctx, "d"))
	list := pods("a", "late", "d")
	f.resync(ctx, &list)
	if !slices.Equal(core.enrolled, []string{"late"}) || m.late != 1 {
		t.Fatalf("enrolled %v (late %d), want [late] counted once: a is known, d was deleted", core.enrolled, m.late)
	}
	// A new sandbox of d (its ADD) lifts the tombstone.
	_, err := tombstoning{f}.Enroll(ctx, enroll.Pod{UID: "d"})
	must(t, err)
	if _, deleted := f.deleted["d"]; deleted {
		t.Fatal("an ADD for d kept its DEL's tombstone")
	}
}

func TestSyncAtStartReconcilesAndCountsLatePods(t *testing.T) {
	core := newFakeCore("enrolled")
	// Enrolled by the previous meshlet: adopted now, not late.
	core.checkpointed = map[string]bool{"adopted": true}
	m := &fakeMetrics{}
	after := false
	f := New(DefaultConfig(), Deps{Core: core, Metrics: m, AfterSync: func(context.Context) { after = true }})
	list := pods("enrolled", "adopted", "new")
	must(t, f.syncAtStart(context.Background(), &list))
	if len(core.reconciled) != 1 || len(core.reconciled[0]) != 3 {
		t.Fatalf("reconciled %v, want the three listed pods once", core.reconciled)
	}
	if m.late != 1 || !after {
		t.Fatalf("late %d (want 1: only the pod the core did not know), AfterSync ran %v", m.late, after)
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
		DialRuntime: func(ctx context.Context) (Lister, error) {
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

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
