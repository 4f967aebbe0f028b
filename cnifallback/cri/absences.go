package cri

import (
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Absences tracks the pods the core knows that listings of the runtime do
// not show, and says when one has been missing long enough to be taken
// for gone: how the daemon learns of a pod whose removal never reached it
// (a lost CNI DEL; NRI stop and removal events the runtime never sent).
//
// A pod is gone once every listing since the first that missed it has
// missed it for the grace, counted from the start of that first listing,
// and the core has not changed the pod's state meanwhile (a new sandbox
// of the same pod enrolled since: the count starts over). The grace must
// exceed the time from a pod's enrollment to its sandbox being listed as
// ready. Pods a listing could not read count as listed.
//
// Not safe for concurrent use.
type Absences struct {
	grace   time.Duration
	missing map[string]time.Time
}

// NewAbsences returns a tracker that takes a pod for gone after grace.
func NewAbsences(grace time.Duration) *Absences {
	return &Absences{grace: grace, missing: map[string]time.Time{}}
}

// Observe records one listing that began at now. known is what the core
// held before the listing began (later enrollments are not the listing's
// to judge); listed holds every UID the listing showed, ready or
// unreadable. It returns the UIDs of the pods gone; they are no longer
// tracked.
func (a *Absences) Observe(now time.Time, known []enroll.PodStatus, listed map[string]bool) (gone []string) {
	missing := make(map[string]time.Time, len(a.missing))
	for _, st := range known {
		if listed[st.UID] {
			continue
		}
		since, ok := a.missing[st.UID]
		if !ok || st.Since.After(since) {
			since = now // newly missing, or the pod changed since: start over
		}
		if now.Sub(since) >= a.grace {
			gone = append(gone, st.UID)
			continue
		}
		missing[st.UID] = since
	}
	a.missing = missing
	return gone
}

// Missing is how many known pods the last listing missed that are not
// gone yet.
func (a *Absences) Missing() int { return len(a.missing) }
