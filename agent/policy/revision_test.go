package policy

import (
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
)

// A revision's policy enrolls the mesh pods that select it: by the
// namespace's istio.io/rev (which wins), else the pod's, directly or
// through a tag; pods that select none by the default tag. A pod it holds
// stays whatever the labels say now; a running pod another agent meshed
// is left to it.
func TestRevisionSelection(t *testing.T) {
	tags := RevisionTags{"default": {"stable"}, "prod": {"canary"}, "split": {"canary", "stable"}}
	ambient := map[string]string{DataplaneModeLabel: DataplaneModeAmbient}
	ns := func(rev string) map[string]string {
		l := map[string]string{DataplaneModeLabel: DataplaneModeAmbient}
		if rev != "" {
			l[RevisionLabel] = rev
		}
		return l
	}
	podRev := func(rev string) map[string]string { return map[string]string{RevisionLabel: rev} }
	meshed := map[string]string{RedirectionAnnotation: "enabled"}
	meshedByCanary := map[string]string{RedirectionAnnotation: "enabled", RevisionAnnotation: "canary"}
	meshedByStable := map[string]string{RedirectionAnnotation: "enabled", RevisionAnnotation: "stable"}
	for _, tc := range []struct {
		name         string
		revision     string
		revisionless RevisionlessPods
		tags         RevisionTags
		podLabels    map[string]string
		annotations  map[string]string
		nsLabels     map[string]string
		held         bool
		wantEnroll   bool
		wantReason   string
		wantOther    bool
	}{
		{name: "namespace names the revision", revision: "canary", nsLabels: ns("canary"), wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "namespace names another", revision: "canary", nsLabels: ns("stable"), wantReason: ReasonOtherRevision, wantOther: true},
		{name: "namespace names a tag of it", revision: "canary", tags: tags, nsLabels: ns("prod"), wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "a tag of another", revision: "stable", tags: tags, nsLabels: ns("prod"), wantReason: ReasonOtherRevision, wantOther: true},
		{name: "a tag two revisions claim goes to the first", revision: "canary", tags: tags, nsLabels: ns("split"), wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "a tag two revisions claim: not the second", revision: "stable", tags: tags, nsLabels: ns("split"), wantReason: ReasonOtherRevision, wantOther: true},
		{name: "namespace wins over the pod", revision: "canary", podLabels: podRev("canary"), nsLabels: ns("stable"), wantReason: ReasonOtherRevision, wantOther: true},
		{name: "the pod's label in a namespace without one", revision: "canary", podLabels: map[string]string{RevisionLabel: "canary", DataplaneModeLabel: DataplaneModeAmbient}, wantEnroll: true, wantReason: ReasonPodLabel},
		{name: "no revision: the default tag's", revision: "stable", tags: tags, nsLabels: ambient, wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "no revision: not the default tag's", revision: "canary", tags: tags, nsLabels: ambient, wantReason: ReasonNoRevision, wantOther: true},
		{name: "no revision, no default tag: the revision named default", revision: "default", nsLabels: ambient, wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "no revision, no default tag, another name", revision: "stable", nsLabels: ambient, wantReason: ReasonNoRevision, wantOther: true},
		{name: "no revision, enroll", revision: "canary", revisionless: RevisionlessEnroll, tags: tags, nsLabels: ambient, wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "no revision, skip", revision: "stable", revisionless: RevisionlessSkip, tags: tags, nsLabels: ambient, wantReason: ReasonNoRevision, wantOther: true},
		{name: "an empty pod label selects no revision", revision: "stable", tags: tags, nsLabels: ambient, podLabels: podRev(""), wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "an empty namespace label selects none, and the pod's does not count", revision: "stable", tags: tags,
			nsLabels: map[string]string{DataplaneModeLabel: DataplaneModeAmbient, RevisionLabel: ""}, podLabels: podRev("canary"), wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "not a mesh pod: the mesh rules' reason", revision: "canary", nsLabels: map[string]string{RevisionLabel: "canary"}, wantReason: ReasonNotSelected},
		{name: "held: stays whatever its labels say now", revision: "canary", nsLabels: ns("stable"), held: true, wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "held: still leaves when it opts out", revision: "canary", nsLabels: ns("canary"), podLabels: map[string]string{DataplaneModeLabel: DataplaneModeNone}, held: true, wantReason: ReasonPodOptOut},
		{name: "meshed by an agent without a revision", revision: "canary", nsLabels: ns("canary"), annotations: meshed, wantReason: ReasonMeshedElsewhere, wantOther: true},
		{name: "meshed by another revision's meshlet", revision: "canary", nsLabels: ns("canary"), annotations: meshedByStable, wantReason: ReasonMeshedElsewhere, wantOther: true},
		{name: "a status no agent writes", revision: "canary", nsLabels: ns("canary"), annotations: map[string]string{RedirectionAnnotation: "disabled"}, wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "its own status on a pod it no longer holds (a new sandbox)", revision: "canary", nsLabels: ns("canary"), annotations: meshedByCanary, wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "not selected by its mesh rules, meshed elsewhere: left to that agent", revision: "canary", nsLabels: map[string]string{RevisionLabel: "canary"}, annotations: meshedByStable, wantReason: ReasonNotSelected, wantOther: true},
		{name: "not selected, its own status: its leftovers", revision: "canary", nsLabels: map[string]string{RevisionLabel: "canary"}, annotations: meshedByCanary, wantReason: ReasonNotSelected},
		{name: "meshed by this one (held)", revision: "canary", nsLabels: ns("canary"), annotations: meshed, held: true, wantEnroll: true, wantReason: ReasonNamespaceLabel},
		{name: "no revision configured: every revision's pods", nsLabels: ns("anything"), annotations: meshed, wantEnroll: true, wantReason: ReasonNamespaceLabel},
	} {
		cfg := Defaults()
		cfg.Revision, cfg.RevisionlessPods = tc.revision, tc.revisionless
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if tc.tags != nil {
			p.SetRevisionTags(tc.tags)
		}
		pod := &enroll.Pod{UID: "u", Name: "p", Namespace: "app", NetnsPath: "/x"}
		d := p.Decide(pod, enroll.PodInfo{NamespaceLabels: tc.nsLabels, PodLabels: tc.podLabels, PodAnnotations: tc.annotations, Held: tc.held})
		if d.Enroll != tc.wantEnroll || d.Reason != tc.wantReason || d.OtherAgent != tc.wantOther {
			t.Errorf("%s: Decide = %+v, want enroll=%v reason=%s otherAgent=%v", tc.name, d, tc.wantEnroll, tc.wantReason, tc.wantOther)
		}
	}
}

func TestRevisionlessPodsValidated(t *testing.T) {
	cfg := Defaults()
	cfg.Revision, cfg.RevisionlessPods = "canary", "sometimes"
	if _, err := New(cfg); err == nil {
		t.Fatal("New accepted revisionless pods \"sometimes\"")
	}
}

func TestRevisionTags(t *testing.T) {
	tags := RevisionTags{"default": {"stable"}, "prod": {"canary"}, "split": {"canary", "stable"}}
	if got := tags.TagsOf("canary"); len(got) != 2 || got[0] != "prod" || got[1] != "split" {
		t.Errorf("TagsOf(canary) = %v, want [prod split]", got)
	}
	if got := tags.TagsOf("stable"); len(got) != 1 || got[0] != "default" {
		t.Errorf("TagsOf(stable) = %v, want [default]: split goes to canary, the first", got)
	}
	if !tags.Equal(RevisionTags{"split": {"canary", "stable"}, "prod": {"canary"}, "default": {"stable"}}) {
		t.Error("Equal: the same tags differ")
	}
	if tags.Equal(RevisionTags{"default": {"canary"}, "prod": {"canary"}, "split": {"canary", "stable"}}) {
		t.Error("Equal: a moved tag is the same")
	}
}
