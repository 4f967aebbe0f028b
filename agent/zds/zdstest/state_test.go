package zdstest

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// connection replays requests through a new session of s, each answered
// with the reason given (a NACK when not empty), and returns the first
// protocol error.
func connection(s *State, reqs ...any) error {
	ss := &session{names: map[string]bool{}}
	for i := 0; i < len(reqs); i++ {
		r := reqs[i].(*Request)
		reason := ""
		if i+1 < len(reqs) {
			if nack, ok := reqs[i+1].(string); ok {
				reason = nack
				i++
			}
		}
		if err := s.apply(ss, r, reason); err != nil {
			return err
		}
	}
	return nil
}

func add(uid string, inode uint64) *Request {
	return &Request{Kind: Add, UID: uid, NetnsInode: inode, Fd: -1}
}
func keep(uid string) *Request { return &Request{Kind: Keep, UID: uid, Fd: -1} }
func del(uid string) *Request  { return &Request{Kind: Del, UID: uid, Fd: -1} }

var snapshot = &Request{Kind: SnapshotSent, Fd: -1}

func wantCounts(t *testing.T, s *State, uid string, starts, drains int) {
	t.Helper()
	if got := s.Counts(uid); got.Starts != starts || got.Drains != drains {
		t.Errorf("%s: %d started, %d drained; want %d, %d", uid, got.Starts, got.Drains, starts, drains)
	}
}

// TestStateAsZtunnel: the stand-in's state follows ztunnel's rules across
// connections: a snapshot drains what it does not name, the same netns is
// a no-op, another netns replaces the proxy, Del before the snapshot only
// un-names.
func TestStateAsZtunnel(t *testing.T) {
	s := &State{}
	defer s.Close()
	if err := connection(s, add("a", 1), add("b", 2), add("c", 3), add("d", 4), snapshot); err != nil {
		t.Fatal(err)
	}
	// A new connection: a again (same netns), b kept, c in a new netns,
	// d deleted before the snapshot, nothing of e (never held).
	if err := connection(s, add("a", 1), keep("b"), add("c", 33), add("d", 4), del("d"), keep("e"), snapshot); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "a", 1, 0)
	wantCounts(t, s, "b", 1, 0)
	wantCounts(t, s, "c", 2, 1)
	wantCounts(t, s, "d", 1, 1)
	if got, want := s.Proxies(), map[string]uint64{"a": 1, "b": 2, "c": 33}; !maps.Equal(got, want) {
		t.Errorf("proxies %v, want %v", got, want)
	}
	if got := s.Disruptions("a", "b", "c", "d"); !slices.Equal(got, []string{"c: 2 proxies started, 1 drained", "d: 1 proxies started, 1 drained"}) {
		t.Errorf("disruptions %q", got)
	}
	// An empty snapshot drains everything: what an agent that replays
	// before it knows its pods does.
	if err := connection(s, snapshot); err != nil {
		t.Fatal(err)
	}
	if len(s.Proxies()) != 0 || len(s.Disruptions("a", "b")) != 2 {
		t.Errorf("after an empty snapshot: proxies %v, disruptions %q", s.Proxies(), s.Disruptions("a", "b"))
	}
}

// TestStateProtocolErrors: Keep after the snapshot and a second snapshot
// end the connection, and are recorded.
func TestStateProtocolErrors(t *testing.T) {
	s := &State{}
	defer s.Close()
	if err := connection(s, snapshot, keep("a")); err == nil {
		t.Error("Keep after SnapshotSent accepted")
	}
	if err := connection(s, snapshot, snapshot); err == nil {
		t.Error("a second SnapshotSent accepted")
	}
	if got := s.Violations(); len(got) != 2 {
		t.Errorf("violations %q, want 2", got)
	}
}

// TestStateRetriesRefusedAdds: a refused Add is retried by ztunnel itself
// until admitted; a Del or a snapshot that does not name it forgets it.
func TestStateRetriesRefusedAdds(t *testing.T) {
	admit := make(chan struct{})
	s := &State{RetryEvery: 5 * time.Millisecond, Admit: func(uid string) string {
		select {
		case <-admit:
			return ""
		default:
			return "not yet"
		}
	}}
	defer s.Close()
	if err := connection(s, snapshot, add("a", 1), "netns not ready", add("b", 2), "netns not ready"); err != nil {
		t.Fatal(err)
	}
	if len(s.Proxies()) != 0 || len(s.Refused()) != 2 {
		t.Fatalf("after two NACKs: proxies %v, refused %v", s.Proxies(), s.Refused())
	}
	if err := connection(s, add("a", 1), "still not ready", snapshot); err != nil { // b not named: forgotten
		t.Fatal(err)
	}
	if got := s.Refused(); len(got) != 1 || got["a"] != 1 {
		t.Fatalf("refused %v, want a alone", got)
	}
	close(admit)
	deadline := time.Now().Add(5 * time.Second)
	for s.Proxies()["a"] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the refused Add was not retried: proxies %v, refused %v", s.Proxies(), s.Refused())
		}
		time.Sleep(time.Millisecond)
	}
	wantCounts(t, s, "a", 1, 0)
	wantCounts(t, s, "b", 0, 0)
}
