package zdstest

import (
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"
)

// State is what a ztunnel keeps across its connections to the agent: one
// proxy per pod UID, and the pods whose Add it refused, which it retries
// by itself. It applies each request as ztunnel does (istio/ztunnel
// src/inpod/statemanager.rs), and counts, per pod, the proxies started and
// drained, so a test can tell when the agent disrupted a pod:
//
//   - On each connection it collects the UIDs that Add and Keep name
//     before SnapshotSent; at SnapshotSent it drains, at once, every proxy
//     the snapshot did not name, and forgets the refused Adds it did not
//     name.
//   - An Add for a UID it runs with the same netns is a no-op (acked
//     whatever the test's Decide says: ztunnel has nothing to refuse);
//     with another netns it drains the old proxy and starts a new one.
//   - Keep after SnapshotSent, or a second SnapshotSent, is a protocol
//     error: ztunnel drops the connection.
//   - Del before SnapshotSent only un-names the UID; after it, Del drains
//     the proxy (or forgets the refused Add).
//   - A refused Add (NACK) is retried every RetryEvery (ztunnel: about
//     5 s) until Admit lets it start or a Del or snapshot forgets it.
//
// One State serves any number of Ztunnel connections, one after another,
// as one ztunnel process does; a ztunnel restart is a new State. The zero
// value is ready to use.
type State struct {
	// RetryEvery is how often a refused Add is retried (0: 5 s).
	RetryEvery time.Duration
	// Admit decides a retry of a refused Add: "" starts the proxy, else it
	// stays refused. nil: every retry starts it.
	Admit func(uid string) string

	mu         sync.Mutex
	proxies    map[string]uint64 // running: uid → netns inode
	refused    map[string]uint64 // refused Adds ztunnel retries: uid → netns inode
	counts     map[string]*Counts
	violations []string
	retrying   bool
	stop       chan struct{}
}

// Counts is what happened to one pod's proxy.
type Counts struct {
	// Starts counts proxies started for the pod.
	Starts int
	// Drains counts proxies drained: by a snapshot that did not name the
	// pod, a Del, or an Add with another netns.
	Drains int
}

// Disrupted reports whether a pod that kept running throughout was
// disrupted: its proxy was drained, or started more than once (a restart
// of the proxy of a pod that kept its netns).
func (c Counts) Disrupted() bool { return c.Drains > 0 || c.Starts > 1 }

// session is one connection's view: whether its snapshot has ended, and
// the UIDs the snapshot has named so far.
type session struct {
	snapshotDone bool
	names        map[string]bool
}

func (s *State) init() {
	if s.proxies == nil {
		s.proxies, s.refused, s.counts = map[string]uint64{}, map[string]uint64{}, map[string]*Counts{}
		s.stop = make(chan struct{})
	}
}

func (s *State) count(uid string) *Counts {
	c := s.counts[uid]
	if c == nil {
		c = &Counts{}
		s.counts[uid] = c
	}
	return c
}

func (s *State) start(uid string, inode uint64) {
	s.proxies[uid] = inode
	delete(s.refused, uid)
	s.count(uid).Starts++
}

func (s *State) drain(uid string) {
	if _, ok := s.proxies[uid]; ok {
		delete(s.proxies, uid)
		s.count(uid).Drains++
	}
}

// running reports whether the pod's proxy runs in the netns with inode.
func (s *State) running(uid string, inode uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.proxies[uid]
	return ok && got == inode
}

// apply applies one request of a connection, answered with reason (""
// acks; else a NACK), and returns a protocol error that ends the
// connection.
func (s *State) apply(ss *session, r *Request, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	var err error
	switch r.Kind {
	case Add:
		if !ss.snapshotDone {
			ss.names[r.UID] = true
		}
		if inode, ok := s.proxies[r.UID]; ok && inode == r.NetnsInode {
			break // the same netns: nothing to do
		}
		// Another netns (a re-created sandbox): the old proxy goes first,
		// whether or not the new one starts.
		s.drain(r.UID)
		if reason != "" {
			s.refused[r.UID] = r.NetnsInode
			s.retryLocked()
			break
		}
		s.start(r.UID, r.NetnsInode)
	case Keep:
		if ss.snapshotDone {
			err = fmt.Errorf("keep %s after SnapshotSent", r.UID)
			break
		}
		ss.names[r.UID] = true
	case Del:
		if !ss.snapshotDone {
			delete(ss.names, r.UID)
			break
		}
		delete(s.refused, r.UID)
		s.drain(r.UID)
	case SnapshotSent:
		if ss.snapshotDone {
			err = fmt.Errorf("a second SnapshotSent")
			break
		}
		ss.snapshotDone = true
		for uid := range s.proxies {
			if !ss.names[uid] {
				s.drain(uid)
			}
		}
		for uid := range s.refused {
			if !ss.names[uid] {
				delete(s.refused, uid)
			}
		}
	}
	if err != nil {
		s.violations = append(s.violations, err.Error())
	}
	return err
}

// retryLocked starts the retry loop if it is not running. s.mu is held.
func (s *State) retryLocked() {
	if s.retrying {
		return
	}
	s.retrying = true
	every := s.RetryEvery
	if every == 0 {
		every = 5 * time.Second
	}
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			s.mu.Lock()
			for uid, inode := range s.refused {
				if s.Admit == nil || s.Admit(uid) == "" {
					s.drain(uid)
					s.start(uid, inode)
				}
			}
			s.mu.Unlock()
		}
	}()
}

// Close stops retrying refused Adds.
func (s *State) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
}

// Proxies returns the running proxies: pod UID → netns inode.
func (s *State) Proxies() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.proxies)
}

// Refused returns the refused Adds ztunnel retries: pod UID → netns inode.
func (s *State) Refused() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.refused)
}

// Counts returns what happened to the pod's proxies.
func (s *State) Counts(uid string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.counts[uid]; c != nil {
		return *c
	}
	return Counts{}
}

// Disruptions names, sorted, each of uids whose proxy was disrupted (see
// Counts.Disrupted), with its counts: for pods that kept running, it must
// be empty.
func (s *State) Disruptions(uids ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, uid := range uids {
		if c := s.counts[uid]; c != nil && c.Disrupted() {
			out = append(out, fmt.Sprintf("%s: %d proxies started, %d drained", uid, c.Starts, c.Drains))
		}
	}
	sort.Strings(out)
	return out
}

// Violations returns the protocol errors seen: requests a real ztunnel
// would have dropped the connection for.
func (s *State) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}
