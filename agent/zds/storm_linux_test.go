package zds_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
)

// TestReconnectStorm: 100 ztunnel connections in a row, each dropped at a
// random point (before its hello, in the middle of the snapshot, between
// an Add and its ack, after SnapshotSent), with pods added and deleted
// between them. Afterwards the server has exactly the pods registered,
// the next connection gets each of them once with its own netns, and the
// server holds one netns descriptor per pod: the storm leaked none.
func TestReconnectStorm(t *testing.T) {
	s := startServer(t, zds.Config{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(12, 34))
	registered := map[string]*enroll.Workload{}
	created, next := 0, 0
	addPod := func() {
		w := workload(t, fmt.Sprintf("pod-%d", next))
		next++
		created++
		if err := s.AddWorkload(ctx, w, enroll.HandoverDeferred); err != nil {
			t.Fatal(err)
		}
		registered[w.UID] = w
	}
	for range 20 {
		addPod()
	}
	base := openFds(t) - created - len(registered) // handles and dups are ours
	drops := map[string]int{}
	for i := range 100 {
		// Between connections, pods come and go (deferred to the next).
		if i%10 == 9 {
			for uid := range registered {
				if err := s.DelWorkload(ctx, uid); err != nil {
					t.Fatal(err)
				}
				delete(registered, uid)
				break
			}
			addPod()
			addPod()
		}
		if rng.IntN(10) == 0 {
			c, err := zdstest.DialRaw(s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			_ = c.Close() // gone before its hello
			drops["before hello"]++
			waitConns(t, s, 0)
			continue
		}
		c, err := zdstest.Dial(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		// A third read the whole snapshot; the others stop somewhere in
		// it, some with an Add unacked.
		whole := rng.IntN(3) == 0
		for stop := rng.IntN(len(registered) + 2); whole || stop > 0; stop-- {
			r, err := c.Recv(wait)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			r.Close()
			if !whole && rng.IntN(8) == 0 {
				drops["before an ack"]++
				break
			}
			if err := c.Ack(); err != nil {
				t.Fatal(err)
			}
			if r.Kind == zdstest.SnapshotSent {
				drops["after the snapshot"]++
				break
			}
		}
		_ = c.Close()
		waitConns(t, s, 0)
	}
	if s.Workloads() != len(registered) {
		t.Fatalf("after the storm the server has %d pods, want %d", s.Workloads(), len(registered))
	}
	_, snap := connect(t, s)
	got := map[string]int{}
	for _, r := range snap {
		if r.Kind != zdstest.Add {
			t.Fatalf("snapshot request %v, want only Adds", r)
		}
		got[r.UID]++
		w, ok := registered[r.UID]
		if !ok || r.NetnsInode != w.Netns.Inode() {
			t.Fatalf("snapshot Add %s with netns %d: not a registered pod's", r.UID, r.NetnsInode)
		}
	}
	for uid := range registered {
		if got[uid] != 1 {
			t.Fatalf("pod %s in the final snapshot %d times, want once", uid, got[uid])
		}
	}
	// The test's own handles, one dup per registered pod in the server,
	// and the final snapshot's fds (closed at cleanup).
	if want, have := base+created+len(registered)+len(snap), openFds(t); have != want {
		t.Fatalf("%d netns descriptors open after the storm, want %d: the storm leaked %d", have, want, have-want)
	}
	t.Logf("100 connections (%v), %d pods at the end; the 101st got each once", drops, len(registered))
}
