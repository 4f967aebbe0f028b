package debug

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/nodestatus"
)

// Failures remembers, per pod, a failed enrollment in a runtime hook
// until the pod enrolls or FailureWindow passes without another attempt.
type Failures struct {
	mu    sync.Mutex
	byUID map[string]nodestatus.Failure
	now   func() time.Time
}

// NewFailures returns an empty record.
func NewFailures() *Failures { return &Failures{byUID: map[string]nodestatus.Failure{}, now: time.Now} }

// Enrolled records one enrollment in a runtime hook: a failure, or a
// success that clears the pod's failures.
func (f *Failures) Enrolled(pod enroll.PodRef, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.byUID, pod.UID)
		return
	}
	prev := f.byUID[pod.UID]
	f.byUID[pod.UID] = nodestatus.Failure{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Reason: err.Error(), At: f.now(), Attempts: prev.Attempts + 1}
}

// Recent are the failures of the last FailureWindow, the latest first.
func (f *Failures) Recent() []nodestatus.Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	maps.DeleteFunc(f.byUID, func(_ string, v nodestatus.Failure) bool { return now.Sub(v.At) > nodestatus.FailureWindow })
	out := slices.Collect(maps.Values(f.byUID))
	slices.SortFunc(out, func(a, b nodestatus.Failure) int { return b.At.Compare(a.At) })
	return out
}
