package policy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
)

// FuzzDecide: for any pod labels, annotations, namespace labels, namespace
// and runtime handler (what a pod's author and a namespace's owner
// control), the decision is one of the documented reasons and never
// meshes a pod that must stay out (host network, an excluded namespace,
// ztunnel itself, a denied handler, a sidecar); a claim is refused exactly
// when its pod cannot be meshed or opts out with its label; and the settings
// annotations are read as strconv.ParseBool reads them, with a warning
// naming each one it cannot read.
func FuzzDecide(f *testing.F) {
	f.Add("app", "istio.io/dataplane-mode=ambient", "", "", "", false)
	f.Add("app", "", "", "istio.io/dataplane-mode=ambient", "", false)
	f.Add("app", "istio.io/dataplane-mode=none", "", "istio.io/dataplane-mode=ambient", "", false)
	f.Add("istio-system", "app=ztunnel\nistio.io/dataplane-mode=ambient", "", "", "", false)
	f.Add("kube-system", "istio.io/dataplane-mode=ambient", "", "", "", false)
	f.Add("app", "istio.io/dataplane-mode=ambient", "sidecar.istio.io/status={}", "", "", false)
	f.Add("app", "istio.io/dataplane-mode=ambient", "ambient.istio.io/dns-capture=maybe\nambient.istio.io/bypass-inbound-capture=1", "", "runsc", false)
	f.Add("app", "istio.io/dataplane-mode=ambient", "", "", "", true)
	f.Add("app", "istio.io/dataplane-mode=AMBIENT", "ambient.istio.io/dns-capture=F", "", "kata", false)

	cfg := Defaults()
	cfg.DeniedRuntimeHandlers = []string{"runsc", "kata"}
	p, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	reasons := []string{ReasonPodLabel, ReasonNamespaceLabel, ReasonNotSelected, ReasonPodOptOut, ReasonHostNetwork,
		ReasonExcludedNS, ReasonZtunnel, ReasonRuntimeHandler, ReasonSidecarInjected}
	f.Fuzz(func(t *testing.T, namespace, labels, annotations, nsLabels, handler string, hostNetwork bool) {
		pod := &enroll.Pod{UID: "u", Name: "p", Namespace: namespace, Labels: keyValues(labels),
			Annotations: keyValues(annotations), RuntimeHandler: handler, HostNetwork: hostNetwork}
		info := enroll.PodInfo{NamespaceLabels: keyValues(nsLabels)}

		d := p.Decide(pod, info)
		if !slices.Contains(reasons, d.Reason) {
			t.Fatalf("reason %q is not a documented one", d.Reason)
		}
		mustStayOut := hostNetwork || slices.Contains(cfg.ExcludedNamespaces, namespace) ||
			(namespace == cfg.ZtunnelNamespace && pod.Labels[ZtunnelAppLabel] == ZtunnelAppValue) ||
			(handler != "" && slices.Contains(cfg.DeniedRuntimeHandlers, handler)) ||
			hasKey(pod.Annotations, cfg.SidecarStatusAnnotation)
		selected := pod.Labels[cfg.DataplaneModeLabel] == DataplaneModeAmbient ||
			(pod.Labels[cfg.DataplaneModeLabel] != DataplaneModeNone && info.NamespaceLabels[cfg.DataplaneModeLabel] == DataplaneModeAmbient)
		if want := selected && !mustStayOut; d.Enroll != want {
			t.Fatalf("Decide = %+v for %+v (namespace labels %v), want enrolled %t", d, pod, info.NamespaceLabels, want)
		}

		claimed := p.DecideClaimed(pod, info)
		if claimed.Enroll == mustStayOut {
			t.Fatalf("DecideClaimed = %+v, want enrolled %t", claimed, !mustStayOut)
		}
		conflict := p.ClaimConflict(pod, info)
		optedOut := pod.Labels[cfg.DataplaneModeLabel] == DataplaneModeNone
		if (conflict == nil) != (!mustStayOut && !optedOut) {
			t.Fatalf("ClaimConflict = %v for %+v: a claim must be refused exactly when the pod cannot or will not be meshed", conflict, pod)
		}

		o, warnings := p.PodSettings(pod, info)
		bad := 0
		for key, got := range map[string]*bool{cfg.DNSCaptureAnnotation: o.DNSCapture, cfg.BypassInboundAnnotation: o.BypassInbound} {
			v, present := pod.Annotations[key]
			want, err := strconv.ParseBool(v)
			switch {
			case !present || err != nil:
				if got != nil {
					t.Fatalf("annotation %s=%q (present %t) set the setting to %t", key, v, present, *got)
				}
				if present {
					bad++
					if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, key) }) {
						t.Fatalf("no warning names the unreadable annotation %s=%q: %q", key, v, warnings)
					}
				}
			case got == nil || *got != want:
				t.Fatalf("annotation %s=%q read as %v, want %t", key, v, got, want)
			}
		}
		if len(warnings) != bad {
			t.Fatalf("%d warnings for %d unreadable annotations: %q", len(warnings), bad, warnings)
		}
	})
}

// keyValues reads "k=v" lines (a line without = is a key with an empty
// value); nil for "".
func keyValues(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m
}

// FuzzRevisionsAreExclusive: whatever labels a pod and its namespace have
// and wherever two tags point (one revision each, as istioctl keeps them),
// two revisions' policies never both take a pod that neither holds; a pod
// the mesh rules select and no agent meshed is taken by the revision its
// labels resolve to, if it is one of the two; and a pod is left to another
// agent (OtherAgent, its rules kept) exactly when it is another revision's
// or another agent's status is on it.
func FuzzRevisionsAreExclusive(f *testing.F) {
	f.Add("istio.io/dataplane-mode=ambient", "", "", "stable", "next", "canary")
	f.Add("istio.io/rev=next", "istio.io/dataplane-mode=ambient", "", "canary", "next", "canary")
	f.Add("istio.io/rev=canary", "istio.io/dataplane-mode=ambient\nistio.io/rev=stable", "", "", "", "")
	f.Add("", "istio.io/dataplane-mode=ambient\nistio.io/rev=default", "", "stable", "default", "canary")
	f.Add("istio.io/dataplane-mode=ambient", "", "ambient.istio.io/redirection=enabled", "canary", "", "")
	f.Add("istio.io/dataplane-mode=ambient", "", "ambient.istio.io/redirection=enabled\nmeshlet.dev/revision=canary", "canary", "", "")
	f.Add("", "istio.io/rev=stable", "ambient.istio.io/redirection=enabled\nmeshlet.dev/revision=stable", "", "", "")
	f.Fuzz(func(t *testing.T, labels, nsLabels, annotations, defaultTag, tag, tagRev string) {
		tags := RevisionTags{}
		if defaultTag != "" {
			tags[DefaultTag] = []string{defaultTag}
		}
		if tag != "" && tagRev != "" && tag != DefaultTag {
			tags[tag] = []string{tagRev}
		}
		info := enroll.PodInfo{NamespaceLabels: keyValues(nsLabels), PodLabels: keyValues(labels), PodAnnotations: keyValues(annotations)}
		pod := &enroll.Pod{UID: "u", Name: "p", Namespace: "app", NetnsPath: "/x"}
		took := map[string]bool{}
		for _, rev := range []string{"stable", "canary"} {
			cfg := Defaults()
			cfg.Revision = rev
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			p.SetRevisionTags(tags)
			d := p.Decide(pod, info)
			took[rev] = d.Enroll
			revisionReason := slices.Contains([]string{ReasonOtherRevision, ReasonNoRevision, ReasonMeshedElsewhere}, d.Reason)
			status := info.PodAnnotations[RedirectionAnnotation]
			elsewhere := (status == "enabled" || status == "pending") && info.PodAnnotations[RevisionAnnotation] != rev
			if d.Enroll && (d.OtherAgent || revisionReason) || !d.Enroll && d.OtherAgent != (revisionReason || elsewhere) {
				t.Fatalf("revision %s: %+v: OtherAgent must be set exactly for the revision reasons and for pods another agent meshed", rev, d)
			}
		}
		if took["stable"] && took["canary"] {
			t.Fatalf("both revisions take the pod (labels %v, namespace %v, tags %v)", info.PodLabels, info.NamespaceLabels, tags)
		}
		base, err := New(Defaults())
		if err != nil {
			t.Fatal(err)
		}
		_, meshed := info.PodAnnotations[RedirectionAnnotation]
		want, _ := PodRevision(info.PodLabels, info.NamespaceLabels)
		if revs, ok := tags[want]; ok {
			want = revs[0]
		} else if want == "" {
			want = DefaultRevision
			if revs, ok := tags[DefaultTag]; ok {
				want = revs[0]
			}
		}
		if base.Decide(pod, info).Enroll && !meshed && (want == "stable" || want == "canary") && !took[want] {
			t.Fatalf("revision %s does not take a mesh pod that resolves to it (labels %v, namespace %v, tags %v)", want, info.PodLabels, info.NamespaceLabels, tags)
		}
	})
}
