package agent

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/cnifallback/cri"
)

// The runtime's CRI listing is faked here: the sweep's decisions are what
// is tested. test/e2e runs it against containerd restarted under its pods.

type sweptCoreFake struct {
	pods      []enroll.PodStatus
	forgotten []string
}

func (c *sweptCoreFake) Pods() []enroll.PodStatus { return c.pods }
func (c *sweptCoreFake) Forget(_ context.Context, uid string) error {
	c.forgotten = append(c.forgotten, uid)
	return nil
}

type listerFake struct {
	runtime string
	uids    []string
	err     error
}

func (l *listerFake) RunningPods(context.Context) ([]enroll.Pod, []string, error) {
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

func TestSweepForgetsPodsTheRuntimeNoLongerRuns(t *testing.T) {
	const interval = time.Second
	t0 := time.Now()
	known := []enroll.PodStatus{{UID: "a", Since: t0.Add(-time.Hour)}, {UID: "b", Since: t0.Add(-time.Hour)}}
	newSweep := func(core *sweptCoreFake, m *missedFake, nriRuntime string) *removalSweep {
		return &removalSweep{core: core, metrics: m, interval: interval, absences: cri.NewAbsences(2 * interval),
			nriRuntime: func() string { return nriRuntime }}
	}
	ctx := context.Background()

	core, m := &sweptCoreFake{pods: known}, &missedFake{}
	s := newSweep(core, m, "containerd")
	onlyA := &listerFake{runtime: "containerd", uids: []string{"a"}}
	s.sweep(ctx, onlyA, t0)
	s.sweep(ctx, onlyA, t0.Add(interval))
	if len(core.forgotten) != 0 {
		t.Fatalf("b forgotten %v after missing for one interval; the grace is two", core.forgotten)
	}
	s.sweep(ctx, onlyA, t0.Add(2*interval))
	if !slices.Equal(core.forgotten, []string{"b"}) || m.n != 1 {
		t.Fatalf("forgotten %v (counted %d) after b was missing for two intervals, want [b] counted once", core.forgotten, m.n)
	}

	for _, c := range []struct {
		name       string
		nriRuntime string
		lister     *listerFake
	}{
		{"the CRI socket serves another runtime", "containerd", &listerFake{runtime: "cri-o"}},
		{"NRI has not connected yet", "", &listerFake{runtime: "containerd"}},
		{"the listing fails", "containerd", &listerFake{runtime: "containerd", err: errors.New("unavailable")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			core, m := &sweptCoreFake{pods: known}, &missedFake{}
			s := newSweep(core, m, c.nriRuntime)
			for i := range 5 {
				s.sweep(ctx, c.lister, t0.Add(time.Duration(i)*interval))
			}
			if len(core.forgotten) != 0 || m.n != 0 {
				t.Fatalf("forgotten %v: a listing that cannot be trusted took pods for gone", core.forgotten)
			}
			if s.refused == "" {
				t.Fatal("the sweep did not record why it refused the listing")
			}
		})
	}
}
