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
