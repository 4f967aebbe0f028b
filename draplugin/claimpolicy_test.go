package draplugin

import (
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// TestClaimPolicy: a pod a claim was prepared for is must-mesh whatever
// its labels; a pod that joined a shared claim later is must-mesh unless
// it could not have held the claim, then its labels decide; other pods are
// decided by labels.
func TestClaimPolicy(t *testing.T) {
	dir := t.TempDir()
	claims, err := claimstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	if err := claims.Put(claimstore.Claim{UID: "c1", Namespace: "shop", Name: "mesh", Pods: []string{"prepared"}}); err != nil {
		t.Fatal(err)
	}
	labels, err := policy.New(policy.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	p := NewClaimPolicy(labels, claims)
	none := map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeNone}
	joined := enroll.PodInfo{ResourceClaims: []string{"mesh"}}
	for _, c := range []struct {
		name   string
		pod    enroll.Pod
		info   enroll.PodInfo
		enroll bool
		reason string
	}{
		{"prepared, labelled none", enroll.Pod{UID: "prepared", Namespace: "shop", Labels: none}, enroll.PodInfo{}, true, policy.ReasonClaim},
		{"prepared, host network", enroll.Pod{UID: "prepared", Namespace: "shop", HostNetwork: true}, enroll.PodInfo{}, false, policy.ReasonHostNetwork},
		{"joined later", enroll.Pod{UID: "late", Namespace: "shop"}, joined, true, policy.ReasonClaim},
		{"joined later, labelled none", enroll.Pod{UID: "late", Namespace: "shop", Labels: none}, joined, false, policy.ReasonPodOptOut},
		{"joined later, host network", enroll.Pod{UID: "late", Namespace: "shop", HostNetwork: true}, joined, false, policy.ReasonHostNetwork},
		{"same claim name, other namespace", enroll.Pod{UID: "other", Namespace: "elsewhere"}, joined, false, policy.ReasonNotSelected},
		{"no claim, ambient namespace", enroll.Pod{UID: "plain", Namespace: "shop"},
			enroll.PodInfo{NamespaceLabels: map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}}, true, policy.ReasonNamespaceLabel},
	} {
		d := p.Decide(&c.pod, c.info)
		if d.Enroll != c.enroll || d.Reason != c.reason {
			t.Errorf("%s: %+v, want enroll %t reason %s", c.name, d, c.enroll, c.reason)
		}
	}
}
