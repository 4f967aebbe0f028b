package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/nodesettings"
)

// With enablement selectors, they alone select (as in Istio), after the
// rules that keep a pod out whatever selects it.
func TestEnablementSelectorsReplaceTheLabelRules(t *testing.T) {
	sel, err := nodesettings.Compile([]nodesettings.EnablementSelector{
		{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
		{NamespaceSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "mesh", Operator: metav1.LabelSelectorOpIn, Values: []string{"yes"}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.EnablementSelectors = sel
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(ns string, labels map[string]string) *enroll.Pod {
		return &enroll.Pod{UID: "u", Name: "p", Namespace: ns, NetnsPath: "/x", Labels: labels}
	}
	ambient := map[string]string{DataplaneModeLabel: DataplaneModeAmbient}
	for _, tc := range []struct {
		name       string
		pod        *enroll.Pod
		nsLabels   map[string]string
		wantEnroll bool
		wantReason string
	}{
		{"pod selector", pod("shop", map[string]string{"team": "payments"}), nil, true, ReasonSelector},
		{"namespace selector", pod("shop", nil), map[string]string{"mesh": "yes"}, true, ReasonSelector},
		{"the label no longer selects", pod("shop", ambient), ambient, false, ReasonNotSelected},
		{"excluded namespace still wins", pod("kube-system", map[string]string{"team": "payments"}), nil, false, ReasonExcludedNS},
	} {
		d := p.Decide(tc.pod, enroll.PodInfo{NamespaceLabels: tc.nsLabels})
		if d.Enroll != tc.wantEnroll || d.Reason != tc.wantReason {
			t.Errorf("%s: Decide = %+v, want enroll=%v reason=%s", tc.name, d, tc.wantEnroll, tc.wantReason)
		}
	}

	// An empty list selects no pod; nil is the label rules again.
	cfg.EnablementSelectors = []nodesettings.Selector{}
	if err := p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(pod("shop", map[string]string{"team": "payments"}), enroll.PodInfo{}); d.Enroll {
		t.Errorf("no selectors: Decide = %+v, want not selected", d)
	}
	cfg.EnablementSelectors = nil
	if err := p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(pod("shop", ambient), enroll.PodInfo{}); !d.Enroll || d.Reason != ReasonPodLabel {
		t.Errorf("label rules again: Decide = %+v, want the pod label to select", d)
	}
}

// Update takes effect for the next decision; an invalid configuration
// changes nothing.
func TestUpdate(t *testing.T) {
	p, err := New(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	pod := &enroll.Pod{UID: "u", Name: "p", Namespace: "shop", NetnsPath: "/x", Labels: map[string]string{DataplaneModeLabel: DataplaneModeAmbient}}
	cfg := Defaults()
	cfg.ExcludedNamespaces = []string{"shop"}
	if err := p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(pod, enroll.PodInfo{}); d.Reason != ReasonExcludedNS {
		t.Fatalf("after Update: %+v, want excluded", d)
	}
	bad := Defaults()
	bad.DataplaneModeLabel = ""
	if err := p.Update(bad); err == nil {
		t.Fatal("Update accepted an empty dataplane-mode label")
	}
	if d := p.Decide(pod, enroll.PodInfo{}); d.Reason != ReasonExcludedNS {
		t.Fatalf("after a refused Update: %+v, want the previous configuration (excluded)", d)
	}
}
