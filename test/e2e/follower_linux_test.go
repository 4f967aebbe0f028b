package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
)

// ztunnelFollower keeps a ztunnel stand-in connected to meshlet's socket as
// the real ztunnel does: when meshlet goes (an update), it dials again, 10
// ms later, doubling to 15 s, until the next meshlet answers. Its State is
// one ztunnel process's across every connection, so a restart that drains
// a pod shows. Each connection is a session; every request of every
// session is kept, with the time it arrived.
type ztunnelFollower struct {
	t     testing.TB
	path  string
	state *zdstest.State

	mu       sync.Mutex
	decide   func(*zdstest.Request) string // see setDecide
	sessions []*zdstest.Ztunnel
	gaps     []time.Duration // between a session's end and the next one's snapshot

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func followZtunnel(t testing.TB, path string) *ztunnelFollower {
	f := &ztunnelFollower{t: t, path: path, stop: make(chan struct{}), done: make(chan struct{})}
	f.state = f.newState()
	go f.run()
	t.Cleanup(f.close)
	return f
}

func (f *ztunnelFollower) run() {
	defer close(f.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-f.stop
		cancel()
	}()
	var lost time.Time // when the last session ended
	backoff := redialMin
	for {
		f.mu.Lock()
		zt := &zdstest.Ztunnel{State: f.state, Decide: f.decideNow}
		f.mu.Unlock()
		if err := zt.Start(f.path); err == nil {
			f.mu.Lock()
			f.sessions = append(f.sessions, zt)
			f.mu.Unlock()
			if zt.WaitSnapshot(ctx) == nil {
				backoff = redialMin
				if !lost.IsZero() {
					f.mu.Lock()
					f.gaps = append(f.gaps, time.Since(lost))
					f.mu.Unlock()
				}
			}
			select {
			case <-zt.Done():
				lost = time.Now()
				zt.Stop() // its fds; its requests stay readable
			case <-f.stop:
				return
			}
		}
		select {
		case <-f.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, redialMax)
	}
}

// ztunnel's redial backoff (istio/ztunnel src/inpod/workloadmanager.rs).
const (
	redialMin = 10 * time.Millisecond
	redialMax = 15 * time.Second
)

// newState is a new ztunnel process's state: its own retries of refused
// Adds ask setDecide's function too.
func (f *ztunnelFollower) newState() *zdstest.State {
	return &zdstest.State{Admit: func(uid string) string {
		return f.decideNow(&zdstest.Request{Kind: zdstest.Add, UID: uid})
	}}
}

// setDecide makes fn answer every request from now on, in every session
// (nil: ack them all), as zdstest.Ztunnel.Decide.
func (f *ztunnelFollower) setDecide(fn func(*zdstest.Request) string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decide = fn
}

func (f *ztunnelFollower) decideNow(r *zdstest.Request) string {
	f.mu.Lock()
	fn := f.decide
	f.mu.Unlock()
	if fn == nil {
		return ""
	}
	return fn(r)
}

// close stops following and closes every fd received.
func (f *ztunnelFollower) close() {
	f.closeOnce.Do(func() {
		close(f.stop)
		<-f.done
		for _, s := range f.all() {
			s.Stop()
		}
		f.ztunnel().Close()
	})
}

func (f *ztunnelFollower) all() []*zdstest.Ztunnel {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*zdstest.Ztunnel(nil), f.sessions...)
}

// current waits for a live session that has had its snapshot, and returns
// it as the mesh the checks read.
func (f *ztunnelFollower) current() *mesh {
	f.t.Helper()
	var zt *zdstest.Ztunnel
	waitFor(f.t, "the ztunnel stand-in connected to a meshlet, snapshot received", func() bool {
		s := f.all()
		if len(s) == 0 {
			return false
		}
		zt = s[len(s)-1]
		select {
		case <-zt.Done():
			return false
		default:
		}
		return zdstest.Count(zt.Requests(), zdstest.SnapshotSent) > 0
	})
	return &mesh{t: f.t, env: theEnv(f.t), socket: f.path, zt: zt, state: f.ztunnel()}
}

// ztunnel is the ztunnel process's state now.
func (f *ztunnelFollower) ztunnel() *zdstest.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

// restartZtunnel stands for a ztunnel restart: the process's state is new
// (every pod is handed to it again) and its connection goes.
func (f *ztunnelFollower) restartZtunnel() {
	f.mu.Lock()
	old := f.state
	f.state = f.newState()
	var cur *zdstest.Ztunnel
	if n := len(f.sessions); n > 0 {
		cur = f.sessions[n-1]
	}
	f.mu.Unlock()
	old.Close()
	if cur != nil {
		cur.Stop()
	}
}

// firstAdd is when ztunnel first received an Add for the pod, in any
// session (zero if never).
func (f *ztunnelFollower) firstAdd(uid string) time.Time {
	var first time.Time
	for _, s := range f.all() {
		for _, r := range s.Requests() {
			if r.Kind == zdstest.Add && r.UID == uid && (first.IsZero() || r.At.Before(first)) {
				first = r.At
			}
		}
	}
	return first
}

// repeatedAdds names the pods with more than one Add in one session (each
// session is one meshlet's account: a replay after a reconnect is a new
// session).
func (f *ztunnelFollower) repeatedAdds() []string {
	var out []string
	for i, s := range f.all() {
		n := map[string]int{}
		for _, r := range s.Requests() {
			if r.Kind == zdstest.Add {
				if n[r.UID]++; n[r.UID] == 2 {
					out = append(out, fmt.Sprintf("%s in session %d", r.UID, i))
				}
			}
		}
	}
	return out
}

// handoverGaps are the times ztunnel was without a meshlet: from the end
// of a session to the next one's snapshot.
func (f *ztunnelFollower) handoverGaps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.gaps...)
}
