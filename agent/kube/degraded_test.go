package kube

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestDegradedSetIsBounded: a pod resolved without the API that the
// informer never sees (removed before it could) leaves the set after
// degradedTTL, so the set holds at most the pods a node starts in that
// time; one noted since stays.
func TestDegradedSetIsBounded(t *testing.T) {
	w := &Watcher{degraded: map[types.UID]time.Time{}}
	t0 := time.Unix(1000, 0)
	w.noteDegraded("gone", t0)
	w.noteDegraded("recent", t0.Add(degradedTTL/2))
	w.noteDegraded("new", t0.Add(degradedTTL+time.Second))
	if _, ok := w.degraded["gone"]; ok || len(w.degraded) != 2 {
		t.Fatalf("degraded set %v; want recent and new only", w.degraded)
	}
}
