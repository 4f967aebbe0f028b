package cri

import (
	"context"
	"time"

	"k8s.io/klog/v2"

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

// Observe records one listing (pods, and the UIDs of running pods it
// could not read) that began at now. known is what the core held before
// the listing began: later enrollments are not the listing's to judge. It
// returns the pods gone, as known saw them; they are no longer tracked.
func (a *Absences) Observe(now time.Time, known []enroll.PodStatus, pods []enroll.Pod, unreadable []string) (gone []enroll.PodStatus) {
	listed := make(map[string]bool, len(pods)+len(unreadable))
	for _, p := range pods {
		listed[p.UID] = true
	}
	for _, uid := range unreadable {
		listed[uid] = true
	}
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
			gone = append(gone, st)
			continue
		}
		missing[st.UID] = since
	}
	a.missing = missing
	return gone
}

// Forgetter is the part of the core that drops a pod gone from the
// listings.
type Forgetter interface {
	ForgetUnchanged(ctx context.Context, st enroll.PodStatus) (bool, error)
}

var _ Forgetter = (*enroll.Core)(nil)

// ForgetGone forgets the pods Observe returned, each only if the core has
// not changed it since (a new sandbox of the pod enrolled while the
// listing ran). It returns how many of them were in the mesh or on their
// way in: those are the removals that never reached the daemon (unheard
// names what did not arrive, for the log). Pods stopped, refused or left
// out of the mesh are forgotten quietly: their sandbox may rightly linger
// not ready (a completed Job's), or the runtime sends no removal for it (a
// refused sandbox).
func ForgetGone(ctx context.Context, core Forgetter, gone []enroll.PodStatus, unheard string) (missed int) {
	logger := klog.FromContext(ctx)
	for _, st := range gone {
		pod := klog.KRef(st.Namespace, st.Name)
		forgotten, err := core.ForgetUnchanged(ctx, st)
		if err != nil {
			logger.Error(err, "Forgetting a removed pod", "pod", pod, "podUID", st.UID)
		}
		switch {
		case !forgotten:
			logger.V(2).Info("Not forgetting a pod the listing missed: it changed since", "pod", pod, "podUID", st.UID)
		case st.State == enroll.StateEnrolled || st.State == enroll.StatePending:
			missed++
			logger.Info("Forgetting a pod the runtime no longer runs: "+unheard+" never reached meshlet", "pod", pod, "podUID", st.UID)
		default:
			logger.V(2).Info("Forgot a pod the runtime no longer runs", "pod", pod, "podUID", st.UID, "state", st.State)
		}
	}
	return missed
}
