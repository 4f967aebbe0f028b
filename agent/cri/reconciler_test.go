package cri

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
)

// The runtime's CRI listing is faked here, and so is the core (whose
// ForgetUnchanged is tested in agent/enroll): the reconciler's decisions,
// as NRI mode configures it, are what is tested. test/e2e runs it against
// containerd restarted under its pods.

type sweptCoreFake struct {
	pods      map[string]enroll.PodStatus
	forgotten []string
}

func newSweptCore(sts ...enroll.PodStatus) *sweptCoreFake {
	c := &sweptCoreFake{pods: map[string]enroll.PodStatus{}}
	for _, st := range sts {
		c.pods[st.UID] = st
	}
	return c
}

func (c *sweptCoreFake) Pods() []enroll.PodStatus {
	var out []enroll.PodStatus
	for _, st := range c.pods {
		out = append(out, st)
	}
	return out
}

func (c *sweptCoreFake) ForgetUnchanged(_ context.Context, st enroll.PodStatus) (bool, error) {
	if now, ok := c.pods[st.UID]; !ok || now.State != st.State || !now.Since.Equal(st.Since) {
		return false, nil
	}
	delete(c.pods, st.UID)
	c.forgotten = append(c.forgotten, st.UID)
	return true, nil
}

type listerFake struct {
	runtime string
	uids    []string
	err     error
	during  func() // runs while the listing is taken
}

func (l *listerFake) RunningPods(context.Context) ([]enroll.Pod, []string, error) {
	if l.during != nil {
		l.during()
	}
	if l.err != nil {
		return nil, nil, l.err
	}
	pods := []enroll.Pod{}
	for _, u := range l.uids {
		pods = append(pods, enroll.Pod{UID: u})
	}
	return pods, nil, nil
}
func (l *listerFake) Close() error                    { return nil }
func (l *listerFake) Runtime() (name, version string) { return l.runtime, "v2.4.2" }

type missedFake struct{ n int }

func (m *missedFake) MissedRemovals(n int) { m.n += n }

const sweepInterval = time.Second

func newTestSweep(core *sweptCoreFake, m *missedFake, nriRuntime string) *Reconciler {
	return NewReconciler(core, ReconcilerConfig{Interval: sweepInterval, Grace: 2 * sweepInterval, Unheard: "its stop and removal",
		Check: SameRuntime(func() string { return nriRuntime }), Missed: m.MissedRemovals})
}

func TestNRIReconcilerForgetsPodsTheRuntimeNoLongerRuns(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	long := t0.Add(-time.Hour)
	enrolled := func(uid string) enroll.PodStatus {
		return enroll.PodStatus{UID: uid, State: enroll.StateEnrolled, Since: long}
	}

	core, m := newSweptCore(enrolled("a"), enrolled("b"),
		enroll.PodStatus{UID: "stopped", State: enroll.StateReleased, Since: long},
		enroll.PodStatus{UID: "refused", State: enroll.StateFailed, Since: long}), &missedFake{}
	s := newTestSweep(core, m, "containerd")
	onlyA := &listerFake{runtime: "containerd", uids: []string{"a"}}
	s.Pass(ctx, onlyA, t0)
	s.Pass(ctx, onlyA, t0.Add(sweepInterval))
	if len(core.forgotten) != 0 {
		t.Fatalf("forgotten %v after one interval; the grace is two", core.forgotten)
	}
	s.Pass(ctx, onlyA, t0.Add(2*sweepInterval))
	slices.Sort(core.forgotten)
	if !slices.Equal(core.forgotten, []string{"b", "refused", "stopped"}) {
		t.Fatalf("forgotten %v after two intervals, want b, refused and stopped", core.forgotten)
	}
	// A stopped pod's sandbox may linger not ready (a completed Job's),
	// and the runtime sends no removal for a refused one: only b's
	// removal was missed.
	if m.n != 1 {
		t.Fatalf("missed removals counted %d, want 1 (b)", m.n)
	}

	t.Run("a new sandbox of the pod enrolled during the listing", func(t *testing.T) {
		core, m := newSweptCore(enrolled("a"), enrolled("b")), &missedFake{}
		s := newTestSweep(core, m, "containerd")
		l := &listerFake{runtime: "containerd", uids: []string{"a"}}
		s.Pass(ctx, l, t0)
		s.Pass(ctx, l, t0.Add(sweepInterval))
		l.during = func() { core.pods["b"] = enroll.PodStatus{UID: "b", State: enroll.StateEnrolled, Since: time.Now()} }
		s.Pass(ctx, l, t0.Add(2*sweepInterval))
		if len(core.forgotten) != 0 || m.n != 0 {
			t.Fatalf("forgotten %v: the new sandbox of b, enrolled while the listing ran, was taken for gone", core.forgotten)
		}
	})

	for _, c := range []struct {
		name       string
		nriRuntime string
		lister     *listerFake
	}{
		{"the CRI socket serves another runtime", "containerd", &listerFake{runtime: "cri-o"}},
		{"the CRI socket lists none of the known pods", "containerd", &listerFake{runtime: "containerd", uids: []string{"other"}}},
		{"NRI has not connected yet", "", &listerFake{runtime: "containerd"}},
		{"the listing fails", "containerd", &listerFake{runtime: "containerd", err: errors.New("unavailable")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			core, m := newSweptCore(enrolled("a"), enrolled("b")), &missedFake{}
			s := newTestSweep(core, m, c.nriRuntime)
			for i := range 5 {
				s.Pass(ctx, c.lister, t0.Add(time.Duration(i)*sweepInterval))
			}
			if len(core.forgotten) != 0 || m.n != 0 {
				t.Fatalf("forgotten %v: a listing that cannot be trusted took pods for gone", core.forgotten)
			}
			if s.Refused() == "" {
				t.Fatal("the sweep did not record why it refused the listing")
			}
		})
	}
}
