package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Istio's revision conventions, as its sidecar injector and istioctl use
// them.
const (
	// RevisionLabel, on a namespace or a pod, selects a revision or a tag
	// of one.
	RevisionLabel = "istio.io/rev"
	// TagLabel marks a revision tag's MutatingWebhookConfiguration
	// (istio-revision-tag-<tag>, written by istioctl tag set or Istio's
	// chart); its RevisionLabel names the revision the tag points to.
	TagLabel = "istio.io/tag"
	// DefaultTag is the tag whose revision serves the pods that select
	// none.
	DefaultTag = "default"
	// DefaultRevision is the revision of an Istio installed without one:
	// with no default tag, the pods that select no revision are its.
	DefaultRevision = "default"
	// RedirectionAnnotation is the status an ambient node agent (meshlet,
	// istio-cni) sets on a pod it meshed, and removes when it lets it go.
	RedirectionAnnotation = "ambient.istio.io/redirection"
	// RevisionAnnotation is meshlet's own, beside RedirectionAnnotation on
	// a pod a meshlet with a revision meshed: that revision. It tells a
	// meshlet its own pods (their status outlives a sandbox) from another
	// agent's.
	RevisionAnnotation = "meshlet.dev/revision"
)

// Reasons of revision selection.
const (
	// ReasonOtherRevision: the pod selects another revision.
	ReasonOtherRevision = "other-revision"
	// ReasonNoRevision: the pod selects no revision, and such pods are
	// not this revision's (Config.RevisionlessPods).
	ReasonNoRevision = "no-revision"
	// ReasonMeshedElsewhere: a running pod this agent did not mesh is
	// meshed by another agent (its RedirectionAnnotation): it stays with
	// that one until it restarts.
	ReasonMeshedElsewhere = "meshed-elsewhere"
)

// RevisionlessPods says whether the pods that select no revision (no
// RevisionLabel on their namespace or themselves) are this revision's.
type RevisionlessPods string

const (
	// RevisionlessDefaultTag follows Istio: they are the revision's the
	// default tag points to, or, with no default tag, the revision named
	// default's.
	RevisionlessDefaultTag RevisionlessPods = "default-tag"
	// RevisionlessEnroll: they are this revision's.
	RevisionlessEnroll RevisionlessPods = "enroll"
	// RevisionlessSkip: they are not.
	RevisionlessSkip RevisionlessPods = "skip"
)

// RevisionTags maps each revision tag to the revisions its webhooks name,
// as the cluster has them.
type RevisionTags map[string]TagRevisions

// TagRevisions are the revisions a tag's webhooks name, sorted: one,
// unless they disagree.
type TagRevisions []string

// Revision is the revision the tag points to: of several, the first in
// order, so that every meshlet resolves it alike and one takes the pods
// (meshlet logs the disagreement).
func (r TagRevisions) Revision() string {
	if len(r) == 0 {
		return ""
	}
	return r[0]
}

// SetRevisionTags makes tags the revision tags decisions resolve from now
// on.
func (p *Policy) SetRevisionTags(tags RevisionTags) {
	p.tags.Store(&tags)
}

// RevisionTags returns the tags last set; nil before any.
func (p *Policy) RevisionTags() RevisionTags {
	if t := p.tags.Load(); t != nil {
		return *t
	}
	return nil
}

// TagsOf returns the tags that point to revision, sorted.
func (t RevisionTags) TagsOf(revision string) []string {
	var out []string
	for tag, revs := range t {
		if revs.Revision() == revision {
			out = append(out, tag)
		}
	}
	slices.Sort(out)
	return out
}

// Equal reports whether t and u map the same tags to the same revisions.
func (t RevisionTags) Equal(u RevisionTags) bool {
	return maps.EqualFunc(t, u, func(a, b TagRevisions) bool { return slices.Equal(a, b) })
}

// PodRevision is the revision (or tag) a pod selects and where from: its
// namespace's RevisionLabel, else its own; "" when neither names one. The
// namespace wins, as in Istio's sidecar injector, whose webhooks match a
// pod's own label only in a namespace without one (an empty one
// included).
func PodRevision(podLabels, namespaceLabels map[string]string) (revision, from string) {
	if v, ok := namespaceLabels[RevisionLabel]; ok {
		return v, "namespace"
	}
	if v := podLabels[RevisionLabel]; v != "" {
		return v, "pod"
	}
	return "", ""
}

// revisionGate applies the revision to d, the mesh rules' decision. Without
// a revision, and for a pod this agent holds (info.Held: it meshed it, or
// its checkpoint says so), d stands: a running pod keeps the revision it
// started with, as with sidecars, and moves when it restarts. Otherwise a
// pod the rules select is enrolled only if it selects this revision
// (selectsRevision) and no other agent has meshed it (meshedElsewhere).
// Every pod it leaves out that way, and any pod another agent meshed,
// is decided OtherAgent: its rules are that agent's.
func (c *Config) revisionGate(tags RevisionTags, pod *enroll.Pod, info enroll.PodInfo, d enroll.Decision) enroll.Decision {
	if c.Revision == "" || info.Held {
		return d
	}
	labels, annotations := info.Metadata(pod)
	elsewhere := c.meshedElsewhere(annotations)
	if !d.Enroll {
		d.OtherAgent = elsewhere
		return d
	}
	switch {
	case !c.selectsRevision(tags, labels, info.NamespaceLabels):
		reason := ReasonOtherRevision
		if rev, _ := PodRevision(labels, info.NamespaceLabels); rev == "" {
			reason = ReasonNoRevision
		}
		return enroll.Decision{Reason: reason, OtherAgent: true}
	case elsewhere:
		return enroll.Decision{Reason: ReasonMeshedElsewhere, OtherAgent: true}
	}
	return d
}

// meshedElsewhere reports whether the pod's status says an agent other
// than this revision's meshlet meshed it: RedirectionAnnotation without
// this revision in RevisionAnnotation (another revision's meshlet,
// istio-cni, or a meshlet without a revision). This meshlet's own status
// on a pod it no longer holds (its sandbox recreated, the node rebooted)
// is not.
func (c *Config) meshedElsewhere(annotations map[string]string) bool {
	switch annotations[RedirectionAnnotation] {
	case "enabled", "pending":
		return annotations[RevisionAnnotation] != c.Revision
	}
	return false // none, or a value no agent writes ("disabled")
}

// selectsRevision reports whether the pod's labels select c.Revision,
// directly or through a tag that points to it.
func (c *Config) selectsRevision(tags RevisionTags, podLabels, namespaceLabels map[string]string) bool {
	rev, _ := PodRevision(podLabels, namespaceLabels)
	if rev == "" {
		switch c.RevisionlessPods {
		case RevisionlessEnroll:
			return true
		case RevisionlessSkip:
			return false
		}
		if revs, ok := tags[DefaultTag]; ok {
			return revs.Revision() == c.Revision
		}
		return c.Revision == DefaultRevision
	}
	if revs, ok := tags[rev]; ok {
		return revs.Revision() == c.Revision
	}
	return rev == c.Revision
}

// validateRevision checks the revision settings.
func (c *Config) validateRevision() error {
	switch c.RevisionlessPods {
	case "", RevisionlessDefaultTag, RevisionlessEnroll, RevisionlessSkip:
	default:
		return fmt.Errorf("policy: revisionless pods %q: want %s, %s or %s", c.RevisionlessPods, RevisionlessDefaultTag, RevisionlessEnroll, RevisionlessSkip)
	}
	return nil
}
