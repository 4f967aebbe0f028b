package policy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
)

func TestDecide(t *testing.T) {
	ambientNS := map[string]string{DataplaneModeLabel: DataplaneModeAmbient}
	cfg := Defaults()
	cfg.DeniedRuntimeHandlers = []string{"runsc"}

	type tc struct {
		name       string
		pod        enroll.Pod
		nsLabels   map[string]string
		wantEnroll bool
		wantReason string
	}
	pod := func(mut func(*enroll.Pod)) enroll.Pod {
		p := enroll.Pod{UID: "u", Name: "p", Namespace: "app", NetnsPath: "/x"}
		if mut != nil {
			mut(&p)
		}
		return p
	}
	podLabel := func(v string) func(*enroll.Pod) {
		return func(p *enroll.Pod) { p.Labels = map[string]string{DataplaneModeLabel: v} }
	}
	cases := []tc{
		{"unlabelled pod, unlabelled namespace", pod(nil), nil, false, ReasonNotSelected},
		{"pod label ambient", pod(podLabel("ambient")), nil, true, ReasonPodLabel},
		{"namespace label ambient", pod(nil), ambientNS, true, ReasonNamespaceLabel},
		{"pod label wins reason over namespace", pod(podLabel("ambient")), ambientNS, true, ReasonPodLabel},
		{"pod none opts out of ambient namespace", pod(podLabel("none")), ambientNS, false, ReasonPodOptOut},
		{"pod other value inherits namespace", pod(podLabel("sidecar")), ambientNS, true, ReasonNamespaceLabel},
		{"pod other value, plain namespace", pod(podLabel("sidecar")), nil, false, ReasonNotSelected},
		{"namespace none does not select", pod(nil), map[string]string{DataplaneModeLabel: "none"}, false, ReasonNotSelected},
		{"label value is case sensitive", pod(podLabel("Ambient")), nil, false, ReasonNotSelected},
		{"host network beats pod label", pod(func(p *enroll.Pod) {
			podLabel("ambient")(p)
			p.HostNetwork, p.NetnsPath = true, ""
		}), ambientNS, false, ReasonHostNetwork},
		{"excluded namespace beats pod label", pod(func(p *enroll.Pod) {
			podLabel("ambient")(p)
			p.Namespace = "kube-system"
		}), ambientNS, false, ReasonExcludedNS},
		{"ztunnel itself", pod(func(p *enroll.Pod) {
			p.Namespace = "istio-system"
			p.Labels = map[string]string{"app": "ztunnel", DataplaneModeLabel: "ambient"}
		}), ambientNS, false, ReasonZtunnel},
		{"app=ztunnel elsewhere is an ordinary pod", pod(func(p *enroll.Pod) {
			p.Labels = map[string]string{"app": "ztunnel"}
		}), ambientNS, true, ReasonNamespaceLabel},
		{"denied runtime handler", pod(func(p *enroll.Pod) {
			podLabel("ambient")(p)
			p.RuntimeHandler = "runsc"
		}), nil, false, ReasonRuntimeHandler},
		{"allowed runtime handler", pod(func(p *enroll.Pod) {
			podLabel("ambient")(p)
			p.RuntimeHandler = "runc"
		}), nil, true, ReasonPodLabel},
		{"sidecar-injected pod", pod(func(p *enroll.Pod) {
			p.Annotations = map[string]string{SidecarStatusAnnotation: "{}"}
		}), ambientNS, false, ReasonSidecarInjected},
		{"sidecar beats pod none (reason)", pod(func(p *enroll.Pod) {
			podLabel("none")(p)
			p.Annotations = map[string]string{SidecarStatusAnnotation: ""}
		}), ambientNS, false, ReasonSidecarInjected},
		{"host network beats excluded namespace (reason)", pod(func(p *enroll.Pod) {
			p.HostNetwork, p.Namespace = true, "kube-system"
		}), nil, false, ReasonHostNetwork},
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Decide(&c.pod, enroll.PodInfo{NamespaceLabels: c.nsLabels})
			if d.Enroll != c.wantEnroll || d.Reason != c.wantReason {
				t.Fatalf("Decide = enroll %t reason %q, want enroll %t reason %q", d.Enroll, d.Reason, c.wantEnroll, c.wantReason)
			}
		})
	}
}

func TestAnnotationSettings(t *testing.T) {
	on, off := true, false
	cases := []struct {
		name        string
		cfg         func(*Config)
		ann         map[string]string
		want        enroll.SettingsOverride
		wantWarning string
	}{
		{"no annotations: node defaults", nil, nil, enroll.SettingsOverride{}, ""},
		{"dns capture off", nil, map[string]string{DNSCaptureAnnotation: "false"}, enroll.SettingsOverride{DNSCapture: &off}, ""},
		{"dns capture on", nil, map[string]string{DNSCaptureAnnotation: "true"}, enroll.SettingsOverride{DNSCapture: &on}, ""},
		{"bypass inbound", nil, map[string]string{BypassInboundAnnotation: "true"}, enroll.SettingsOverride{BypassInbound: &on}, ""},
		{"bypass inbound ParseBool forms", nil, map[string]string{BypassInboundAnnotation: "1"}, enroll.SettingsOverride{BypassInbound: &on}, ""},
		{"bad bypass value is left to the default, with a warning", nil, map[string]string{BypassInboundAnnotation: "yes"},
			enroll.SettingsOverride{}, BypassInboundAnnotation},
		{"bad dns value is left to the default, with a warning", nil, map[string]string{DNSCaptureAnnotation: "off"},
			enroll.SettingsOverride{}, DNSCaptureAnnotation},
		{"custom annotation keys", func(c *Config) { c.DNSCaptureAnnotation = "example.com/dns" },
			map[string]string{"example.com/dns": "false", DNSCaptureAnnotation: "true"}, enroll.SettingsOverride{DNSCapture: &off}, ""},
	}
	str := func(b *bool) string {
		if b == nil {
			return "unset"
		}
		return strconv.FormatBool(*b)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Defaults()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			pod := enroll.Pod{Namespace: "app", Labels: map[string]string{DataplaneModeLabel: "ambient"}, Annotations: c.ann}
			got, warnings := p.PodSettings(&pod, enroll.PodInfo{})
			if str(got.DNSCapture) != str(c.want.DNSCapture) || str(got.BypassInbound) != str(c.want.BypassInbound) {
				t.Fatalf("dns %s bypass %s, want dns %s bypass %s", str(got.DNSCapture), str(got.BypassInbound),
					str(c.want.DNSCapture), str(c.want.BypassInbound))
			}
			switch {
			case c.wantWarning == "" && len(warnings) > 0:
				t.Fatalf("unexpected warnings %q", warnings)
			case c.wantWarning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], c.wantWarning)):
				t.Fatalf("warnings %q, want one naming %s", warnings, c.wantWarning)
			}
		})
	}
}

func TestCustomKeys(t *testing.T) {
	cfg := Defaults()
	cfg.DataplaneModeLabel = "mesh.example.com/mode"
	cfg.SidecarStatusAnnotation = "mesh.example.com/sidecar"
	cfg.ExcludedNamespaces = []string{"infra"}
	cfg.ZtunnelNamespace, cfg.ZtunnelLabels = "mesh", map[string]string{"k8s-app": "proxy"}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(ns string, labels, ann map[string]string) enroll.Decision {
		return p.Decide(&enroll.Pod{Namespace: ns, Labels: labels, Annotations: ann}, enroll.PodInfo{})
	}
	if d := decide("app", map[string]string{"mesh.example.com/mode": "ambient"}, nil); d.Reason != ReasonPodLabel {
		t.Errorf("custom label: %s", d.Reason)
	}
	if d := decide("app", map[string]string{DataplaneModeLabel: "ambient"}, nil); d.Enroll {
		t.Errorf("Istio's label selected the pod although the label key was changed")
	}
	if d := decide("app", map[string]string{"mesh.example.com/mode": "ambient"}, map[string]string{"mesh.example.com/sidecar": ""}); d.Reason != ReasonSidecarInjected {
		t.Errorf("custom sidecar annotation: %s", d.Reason)
	}
	if d := decide("kube-system", map[string]string{"mesh.example.com/mode": "ambient"}, nil); !d.Enroll {
		t.Errorf("kube-system still excluded after the list was replaced: %s", d.Reason)
	}
	if d := decide("infra", map[string]string{"mesh.example.com/mode": "ambient"}, nil); d.Reason != ReasonExcludedNS {
		t.Errorf("custom excluded namespace: %s", d.Reason)
	}
	if d := decide("mesh", map[string]string{"mesh.example.com/mode": "ambient", "k8s-app": "proxy"}, nil); d.Reason != ReasonZtunnel {
		t.Errorf("custom ztunnel selector: %s", d.Reason)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"dataplane-mode label": func(c *Config) { c.DataplaneModeLabel = "" },
		"dns-capture":          func(c *Config) { c.DNSCaptureAnnotation = "" },
		"ztunnel labels":       func(c *Config) { c.ZtunnelLabels = nil },
	} {
		cfg := Defaults()
		mut(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("New with empty %s: error %v, want one naming it", name, err)
		}
	}
}

// TestAPIMetadataWins: the API server's current labels and annotations
// override the sandbox's, which were fixed at creation.
func TestAPIMetadataWins(t *testing.T) {
	p, err := New(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	sandbox := enroll.Pod{Namespace: "app", Labels: map[string]string{DataplaneModeLabel: "ambient"}}
	if d := p.Decide(&sandbox, enroll.PodInfo{PodLabels: map[string]string{DataplaneModeLabel: "none"}}); d.Enroll {
		t.Fatalf("opt-out in the API ignored: %s", d.Reason)
	}
	if d := p.Decide(&sandbox, enroll.PodInfo{PodLabels: map[string]string{}}); d.Enroll {
		t.Fatalf("label removed in the API ignored: %s", d.Reason)
	}
	info := enroll.PodInfo{PodAnnotations: map[string]string{DNSCaptureAnnotation: "false"}}
	if o, _ := p.PodSettings(&sandbox, info); o.DNSCapture == nil || *o.DNSCapture {
		t.Fatalf("API annotation ignored: %+v", o)
	}
	if d := p.Decide(&sandbox, enroll.PodInfo{}); !d.Enroll {
		t.Fatalf("sandbox labels not used when the API's are unknown: %s", d.Reason)
	}
}

// claimCases are pods holding a mesh claim: what DecideClaimed decides and
// what ClaimConflict says (wantConflict: substrings of its error; nil: no
// conflict).
type claimCase struct {
	name         string
	pod          enroll.Pod
	info         enroll.PodInfo
	wantEnroll   bool
	wantReason   string
	wantConflict []string
}

func claimCases() []claimCase {
	pod := func(mut func(*enroll.Pod)) enroll.Pod {
		p := enroll.Pod{UID: "u", Name: "p", Namespace: "app", NetnsPath: "/x"}
		if mut != nil {
			mut(&p)
		}
		return p
	}
	none := map[string]string{DataplaneModeLabel: DataplaneModeNone}
	return []claimCase{
		{"plain pod, unlabelled namespace", pod(nil), enroll.PodInfo{}, true, ReasonClaim, nil},
		{"namespace labelled none", pod(nil), enroll.PodInfo{NamespaceLabels: none}, true, ReasonClaim, nil},
		{"pod labelled ambient", pod(func(p *enroll.Pod) { p.Labels = map[string]string{DataplaneModeLabel: DataplaneModeAmbient} }),
			enroll.PodInfo{}, true, ReasonClaim, nil},
		{"pod labelled none", pod(func(p *enroll.Pod) { p.Labels = none }), enroll.PodInfo{}, true, ReasonClaim,
			[]string{"opts out", DataplaneModeLabel + "=none"}},
		{"pod labelled none on the API server only", pod(nil), enroll.PodInfo{PodLabels: none}, true, ReasonClaim,
			[]string{DataplaneModeLabel + "=none"}},
		{"pod's none label removed on the API server", pod(func(p *enroll.Pod) { p.Labels = none }),
			enroll.PodInfo{PodLabels: map[string]string{}}, true, ReasonClaim, nil},
		{"host network", pod(func(p *enroll.Pod) { p.HostNetwork, p.NetnsPath = true, "" }), enroll.PodInfo{}, false, ReasonHostNetwork,
			[]string{"host network"}},
		{"excluded namespace", pod(func(p *enroll.Pod) { p.Namespace = "kube-system" }), enroll.PodInfo{}, false, ReasonExcludedNS,
			[]string{`"kube-system"`, "--excluded-namespaces"}},
		{"ztunnel", pod(func(p *enroll.Pod) { p.Namespace, p.Labels = ZtunnelNamespace, map[string]string{"app": "ztunnel"} }),
			enroll.PodInfo{}, false, ReasonZtunnel, []string{"ztunnel itself"}},
		{"denied runtime handler", pod(func(p *enroll.Pod) { p.RuntimeHandler = "runsc" }), enroll.PodInfo{}, false, ReasonRuntimeHandler,
			[]string{`"runsc"`, "--denied-runtime-handlers"}},
		{"sidecar", pod(func(p *enroll.Pod) { p.Annotations = map[string]string{SidecarStatusAnnotation: "{}"} }), enroll.PodInfo{},
			false, ReasonSidecarInjected, []string{"sidecar", SidecarStatusAnnotation}},
		{"sidecar on the API server only", pod(nil), enroll.PodInfo{PodAnnotations: map[string]string{SidecarStatusAnnotation: "{}"}},
			false, ReasonSidecarInjected, []string{SidecarStatusAnnotation}},
	}
}

func claimPolicy(t *testing.T) *Policy {
	t.Helper()
	cfg := Defaults()
	cfg.DeniedRuntimeHandlers = []string{"runsc"}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDecideClaimed: a claim selects a pod whatever its labels say; only
// what makes in-pod redirection impossible keeps it out.
func TestDecideClaimed(t *testing.T) {
	p := claimPolicy(t)
	for _, c := range claimCases() {
		t.Run(c.name, func(t *testing.T) {
			d := p.DecideClaimed(&c.pod, c.info)
			if d.Enroll != c.wantEnroll || d.Reason != c.wantReason {
				t.Fatalf("DecideClaimed = enroll %t reason %q, want enroll %t reason %q", d.Enroll, d.Reason, c.wantEnroll, c.wantReason)
			}
		})
	}
	// The same unlabelled pod without a claim is not selected.
	pod := enroll.Pod{UID: "u", Name: "p", Namespace: "app", NetnsPath: "/x"}
	if d := p.Decide(&pod, enroll.PodInfo{}); d.Enroll {
		t.Errorf("Decide enrolls an unlabelled pod: %+v", d)
	}
}

// TestClaimConflict: Prepare refuses exactly the pods that could not be
// meshed, or that opt out with their own label, saying why.
func TestClaimConflict(t *testing.T) {
	p := claimPolicy(t)
	for _, c := range claimCases() {
		t.Run(c.name, func(t *testing.T) {
			err := p.ClaimConflict(&c.pod, c.info)
			if c.wantConflict == nil {
				if err != nil {
					t.Fatalf("ClaimConflict = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("ClaimConflict = nil, want a conflict")
			}
			for _, w := range c.wantConflict {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ClaimConflict = %q, want it to mention %q", err, w)
				}
			}
		})
	}
	// A custom label key is the one named.
	cfg := Defaults()
	cfg.DataplaneModeLabel = "example.com/mesh"
	cp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := enroll.Pod{UID: "u", Name: "p", Namespace: "app", Labels: map[string]string{"example.com/mesh": "none", DataplaneModeLabel: "ambient"}}
	if err := cp.ClaimConflict(&pod, enroll.PodInfo{}); err == nil || !strings.Contains(err.Error(), "example.com/mesh=none") {
		t.Errorf("custom label: ClaimConflict = %v", err)
	}
}
