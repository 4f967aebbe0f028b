package debug

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
)

// FailureWindow is how long a pod's failed enrollment counts against the
// node in meshlet status after its last attempt, unless it enrolls.
const FailureWindow = 10 * time.Minute

// Failure is a pod whose last enrollment in a runtime hook failed. The
// runtime removes such a sandbox at once, and the kubelet tries again
// with backoff: the pod is then in no list of the node's pods, and only
// this record says it cannot start.
type Failure struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       string    `json:"uid"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
	// Attempts counts its failed attempts in a row.
	Attempts int `json:"attempts"`
}

// Failures remembers, per pod, a failed enrollment in a runtime hook
// until the pod enrolls or FailureWindow passes without another attempt.
type Failures struct {
	mu    sync.Mutex
	byUID map[string]Failure
	now   func() time.Time
}

// NewFailures returns an empty record.
func NewFailures() *Failures { return &Failures{byUID: map[string]Failure{}, now: time.Now} }

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
	f.byUID[pod.UID] = Failure{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Reason: err.Error(), At: f.now(), Attempts: prev.Attempts + 1}
}

// Recent are the failures of the last FailureWindow, the latest first.
func (f *Failures) Recent() []Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	maps.DeleteFunc(f.byUID, func(_ string, v Failure) bool { return now.Sub(v.At) > FailureWindow })
	out := slices.Collect(maps.Values(f.byUID))
	slices.SortFunc(out, func(a, b Failure) int { return b.At.Compare(a.At) })
	return out
}
