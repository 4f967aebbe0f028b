package state

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The node lock: a successor of the same revision (or without one) waits
// for the holder; another revision's meshlet given the same --state-dir is
// refused at once, naming both revisions. flock locks belong to an open
// file, so one process can play both meshlets.
func TestNodeLockRevisions(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	release, err := AcquireNodeLock(ctx, dir, "stable", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, NodeLockFile)); string(b) != "stable" {
		t.Fatalf("lock file holds %q, want the holder's revision", b)
	}
	_, err = AcquireNodeLock(ctx, dir, "canary", nil)
	if err == nil || !strings.Contains(err.Error(), `revision "stable"`) || !strings.Contains(err.Error(), `revision "canary"`) || !strings.Contains(err.Error(), "--state-dir") {
		t.Fatalf("another revision's meshlet on the same state dir: %v, want a refusal naming both revisions and --state-dir", err)
	}
	for _, rev := range []string{"stable", ""} {
		waited := false
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = AcquireNodeLock(short, dir, rev, func() { waited = true })
		cancel()
		if !waited || err == nil || !strings.Contains(err.Error(), "waiting for the node lock") {
			t.Errorf("a successor with revision %q: waited=%v, %v; want it to wait for the holder", rev, waited, err)
		}
	}
	release()
	release, err = AcquireNodeLock(ctx, dir, "", nil)
	if err != nil {
		t.Fatalf("the holder gone: %v", err)
	}
	defer release()
	if b, _ := os.ReadFile(filepath.Join(dir, NodeLockFile)); len(b) != 0 {
		t.Fatalf("lock file of a meshlet without a revision holds %q", b)
	}
}
