package zds_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// serveUntil serves s until the returned stop is called (or the test ends).
func serveUntil(t testing.TB, s *zds.Server) (stop func()) {
	t.Helper()
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = s.Close()
	}
	t.Cleanup(stop)
	return stop
}

func listen(t testing.TB, cfg zds.Config) *zds.Server {
	t.Helper()
	privtest.RequireRoot(t)
	s, err := zds.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// follow connects a ztunnel stand-in of state to path, retrying until an
// agent answers, and waits for its snapshot.
func follow(t testing.TB, path string, state *zdstest.State) *zdstest.Ztunnel {
	t.Helper()
	zt := &zdstest.Ztunnel{State: state}
	deadline := time.Now().Add(wait)
	for zt.Start(path) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the ztunnel stand-in could not connect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(zt.Stop)
	return zt
}

func waitSnapshot(t testing.TB, zt *zdstest.Ztunnel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := zt.WaitSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRestartDisruptsNoPod: an agent restarts while ztunnel, which keeps
// its proxies, stays. The new agent resumes from the previous one's pods:
// its snapshot waits for the runtime's listing, adopts the pods that run
// (an Add in the same netns: a no-op), names with Keep those not adopted
// yet, and lets ztunnel drain the one that is gone. No running pod's proxy
// is drained or restarted. Without Resume, the same restart drains every
// pod: the stand-in sees what a real ztunnel would do.
func TestRestartDisruptsNoPod(t *testing.T) {
	for _, resume := range []bool{true, false} {
		name := map[bool]string{true: "resumed", false: "without Resume"}[resume]
		t.Run(name, func(t *testing.T) {
			path := socketPath(t)
			state := &zdstest.State{}
			defer state.Close()
			first := listen(t, zds.Config{SocketPath: path})
			stopFirst := serveUntil(t, first)
			zt := follow(t, path, state)
			waitSnapshot(t, zt)
			pods := map[string]*enroll.Workload{}
			for _, uid := range []string{"adopted", "later", "gone"} {
				pods[uid] = workload(t, uid)
				if err := first.AddWorkload(context.Background(), pods[uid], enroll.HandoverNow); err != nil {
					t.Fatal(err)
				}
			}
			stopFirst()
			<-zt.Done()

			second := listen(t, zds.Config{SocketPath: path})
			listed := make(chan struct{})
			if resume {
				second.Resume([]string{"adopted", "later", "gone"}, listed)
			}
			serveUntil(t, second)
			zt = follow(t, path, state)
			if !resume {
				// No hold: the snapshot ends before the listing.
				waitSnapshot(t, zt)
			}
			// The runtime's listing: one pod adopted, one gone.
			if err := second.AddWorkload(context.Background(), pods["adopted"], enroll.HandoverDeferred); err != nil {
				t.Fatal(err)
			}
			if err := second.DelWorkload(context.Background(), "gone"); err != nil {
				t.Fatal(err)
			}
			close(listed)
			waitSnapshot(t, zt)
			// "later" is adopted after the snapshot, in the same netns.
			if err := second.AddWorkload(context.Background(), pods["later"], enroll.HandoverDeferred); err != nil {
				t.Fatal(err)
			}
			// A running pod's Add goes out in the background.
			waitProxies(t, state, 2)
			if v := state.Violations(); len(v) > 0 {
				t.Fatalf("protocol errors: %q", v)
			}
			disrupted := state.Disruptions("adopted", "later")
			if resume && len(disrupted) > 0 {
				t.Errorf("running pods disrupted by the restart: %q", disrupted)
			}
			if !resume && len(disrupted) != 2 {
				t.Errorf("without Resume the stand-in saw disruptions %q, want both running pods drained", disrupted)
			}
			if c := state.Counts("gone"); c.Drains != 1 {
				t.Errorf("the pod that is gone: %+v, want its proxy drained", c)
			}
			if got := state.Proxies(); len(got) != 2 || got["adopted"] != pods["adopted"].NetnsInode || got["later"] != pods["later"].NetnsInode {
				t.Errorf("ztunnel's proxies %v, want adopted and later in their netns", got)
			}
		})
	}
}

// TestSnapshotHoldIsBounded: an agent that never lists the runtime's pods
// (the runtime is down) still ends ztunnel's snapshot after the hold,
// naming the previous agent's pods with Keep.
func TestSnapshotHoldIsBounded(t *testing.T) {
	path := socketPath(t)
	s := listen(t, zds.Config{SocketPath: path, SnapshotHold: 200 * time.Millisecond})
	s.Resume([]string{"p1", "p2"}, make(chan struct{}))
	serveUntil(t, s)
	zt := follow(t, path, &zdstest.State{})
	waitSnapshot(t, zt)
	var got []string
	for _, r := range zt.Requests() {
		got = append(got, r.String())
	}
	if want := []string{"keep p1", "keep p2", "snapshot_sent"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("ztunnel got %q, want %q", got, want)
	}
}

// waitProxies waits until ztunnel runs n proxies.
func waitProxies(t testing.TB, state *zdstest.State, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for len(state.Proxies()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("ztunnel runs proxies %v, want %d", state.Proxies(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitRefused waits until the server counts n refused running pods.
func waitRefused(t testing.TB, s *zds.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for s.Refused() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d refused running pods, want %d", s.Refused(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRefusedRunningPodIsRetried: ztunnel's refusal of a running pod's Add
// keeps the pod registered (the core keeps its rules) and is retried until
// ztunnel takes it; ztunnel is never told to drop it.
func TestRefusedRunningPodIsRetried(t *testing.T) {
	path := socketPath(t)
	told := make(chan string, 10)
	s := listen(t, zds.Config{SocketPath: path, Refused: func(p enroll.PodRef, reason string) {
		told <- fmt.Sprintf("%s/%s %s: %s", p.Namespace, p.Name, p.UID, reason)
	}})
	serveUntil(t, s)
	state := &zdstest.State{RetryEvery: time.Hour} // only meshlet's retries count here
	defer state.Close()
	refusals := 2
	zt := &zdstest.Ztunnel{State: state, Decide: func(r *zdstest.Request) string {
		if r.Kind == zdstest.Add && refusals > 0 {
			refusals--
			return "netns not ready (test)"
		}
		return ""
	}}
	if err := zt.Start(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zt.Stop)
	waitSnapshot(t, zt)
	w := workload(t, "running")
	if err := s.AddWorkload(context.Background(), w, enroll.HandoverDeferred); err != nil {
		t.Fatalf("a running pod's AddWorkload = %v, want it registered whatever ztunnel answers", err)
	}
	waitRefused(t, s, 1)
	waitProxies(t, state, 1)
	if got := state.Proxies()["running"]; got != w.Netns.Inode() {
		t.Fatalf("ztunnel runs the pod in netns %d, want %d", got, w.Netns.Inode())
	}
	waitRefused(t, s, 0) // ztunnel starts the proxy before its ack reaches meshlet
	if s.Workloads() != 1 {
		t.Fatalf("after ztunnel took it: %d registered; want 1", s.Workloads())
	}
	if n := zdstest.Count(zt.Requests(), zdstest.Del); n != 0 {
		t.Fatalf("ztunnel was told %d times to drop a running pod it refused", n)
	}
	if n := zdstest.Count(zt.Requests(), zdstest.Add); n != 3 {
		t.Fatalf("ztunnel got %d Adds, want 3 (two refused, one taken)", n)
	}
	// Told once (a pod event in the daemon), not at every retry.
	if len(told) != 1 {
		t.Fatalf("told of %d refusals, want 1", len(told))
	}
	if got, want := <-told, "ns-running/pod-running running: netns not ready (test)"; got != want {
		t.Fatalf("told %q, want %q", got, want)
	}
}

// TestRefusalInReplayIsRetried: a running pod ztunnel refuses in a new
// connection's snapshot is counted, named with ztunnel's reason, and
// retried until ztunnel takes it, as one refused outside a replay.
func TestRefusalInReplayIsRetried(t *testing.T) {
	path := socketPath(t)
	told := make(chan string, 10)
	s := listen(t, zds.Config{SocketPath: path, Refused: func(p enroll.PodRef, reason string) { told <- reason }})
	serveUntil(t, s)
	w := workload(t, "running")
	if err := s.AddWorkload(context.Background(), w, enroll.HandoverDeferred); err != nil {
		t.Fatalf("a running pod's AddWorkload with no ztunnel = %v, want it registered", err)
	}
	state := &zdstest.State{RetryEvery: time.Hour} // only meshlet's retries count here
	defer state.Close()
	refused := make(chan struct{})
	zt := &zdstest.Ztunnel{State: state, Decide: func(r *zdstest.Request) string {
		select {
		case <-refused:
			return ""
		default:
		}
		if r.Kind == zdstest.Add {
			close(refused)
			return "netns not ready (test)"
		}
		return ""
	}}
	if err := zt.Start(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zt.Stop)
	<-refused
	deadline := time.Now().Add(wait)
	// Named as refused until meshlet's first retry, a second later.
	for s.RefusedPods()["running"] != "netns not ready (test)" {
		if time.Now().After(deadline) {
			t.Fatalf("the pod refused in the replay is not named as refused: %v", s.RefusedPods())
		}
		time.Sleep(time.Millisecond)
	}
	waitProxies(t, state, 1)
	waitRefused(t, s, 0)
	if len(told) != 1 {
		t.Fatalf("told of %d refusals, want 1", len(told))
	}
	if got := <-told; got != "netns not ready (test)" {
		t.Fatalf("told %q, want ztunnel's reason", got)
	}
	if n := zdstest.Count(zt.Requests(), zdstest.Del); n != 0 {
		t.Fatalf("ztunnel was told %d times to drop a running pod it refused", n)
	}
}

// TestForgetInheritedSparesARegisteredPod: the end of a previous agent's
// handover drops the pod at ztunnel unless this agent has handed over a
// workload of the pod itself since (a new sandbox of it, enrolled while
// the runtime's listing took the old one for gone).
func TestForgetInheritedSparesARegisteredPod(t *testing.T) {
	path := socketPath(t)
	s := listen(t, zds.Config{SocketPath: path})
	s.Resume([]string{"gone", "recreated"}, nil)
	serveUntil(t, s)
	state := &zdstest.State{}
	defer state.Close()
	zt := follow(t, path, state)
	waitSnapshot(t, zt)
	w := workload(t, "recreated")
	if err := s.AddWorkload(context.Background(), w, enroll.HandoverNow); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"gone", "recreated"} {
		if err := s.ForgetInherited(context.Background(), uid); err != nil {
			t.Fatal(err)
		}
	}
	if s.Workloads() != 1 {
		t.Fatalf("%d workloads registered, want the recreated pod's", s.Workloads())
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := zt.WaitFor(ctx, func(rs []*zdstest.Request) bool { return zdstest.Count(rs, zdstest.Del) == 1 }); err != nil {
		t.Fatal(err)
	}
	for _, r := range zt.Requests() {
		if r.Kind == zdstest.Del && r.UID != "gone" {
			t.Fatalf("ztunnel got %s, want only del gone", r)
		}
	}
	if got := state.Proxies()["recreated"]; got != w.Netns.Inode() {
		t.Fatalf("ztunnel runs the recreated pod in netns %d, want %d", got, w.Netns.Inode())
	}
	// A later connection names neither the gone pod nor, twice, the other.
	zt.Stop()
	zt = follow(t, path, state)
	waitSnapshot(t, zt)
	var got []string
	for _, r := range zt.Requests() {
		got = append(got, r.String())
	}
	if len(got) != 2 || got[0] != fmt.Sprintf("add recreated (netns inode %d)", w.Netns.Inode()) || got[1] != "snapshot_sent" {
		t.Fatalf("the next snapshot: %q, want the recreated pod's Add and SnapshotSent", got)
	}
}

// TestOneRetryLoopPerPod: a running pod refused by ztunnel, then refused
// again in a new connection's snapshot while meshlet retries it, is sent
// again by one retry loop: once ztunnel takes pods, the newest connection
// gets exactly one Add it takes.
func TestOneRetryLoopPerPod(t *testing.T) {
	path := socketPath(t)
	s := listen(t, zds.Config{SocketPath: path})
	serveUntil(t, s)
	state := &zdstest.State{RetryEvery: time.Hour} // only meshlet's retries count here
	defer state.Close()
	var accept atomic.Bool
	decide := func(r *zdstest.Request) string {
		if r.Kind == zdstest.Add && !accept.Load() {
			return "netns not ready (test)"
		}
		return ""
	}
	first := &zdstest.Ztunnel{State: state, Decide: decide}
	if err := first.Start(path); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, first)
	if err := s.AddWorkload(context.Background(), workload(t, "running"), enroll.HandoverDeferred); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, s, 1)
	first.Stop()
	second := &zdstest.Ztunnel{State: state, Decide: decide}
	if err := second.Start(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	waitSnapshot(t, second) // its replay refused the pod too
	accept.Store(true)
	waitProxies(t, state, 1)
	// Past the longest backoff a second loop would have waited (its
	// first 1 s, then 2 s): no further Add arrives.
	time.Sleep(3 * time.Second)
	taken := 0
	for _, r := range second.Requests() {
		if r.Kind == zdstest.Add && r.Refused == "" {
			taken++
		}
	}
	if taken != 1 || s.Refused() != 0 {
		t.Fatalf("the newest connection took %d Adds of the pod (%d refused pods); want 1 (0)", taken, s.Refused())
	}
}
