package draplugin

import (
	"flag"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/apis/v1alpha1"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// The prepared claims' own tests are in package claimstore; these build the
// claims Prepare's tests expect and read back.

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func bp(b bool) *bool { return &b }

func meshConfig(dns, inbound *bool) v1alpha1.MeshConfig {
	return v1alpha1.MeshConfig{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.Kind, DNSCapture: dns, InboundCapture: inbound}
}

func testClaim(uid string, pods []string, dns, inbound *bool) claimstore.Claim {
	return claimstore.Claim{
		UID: uid, Namespace: "app", Name: "claim-" + uid, Pods: pods,
		Settings: meshConfig(dns, inbound),
		Devices:  []claimstore.AllocatedDevice{{Request: "mesh", Pool: "node-1", Device: DeviceName, ShareID: "share-" + uid}},
	}
}

func openStore(t testing.TB, dir string) *claimstore.Store {
	t.Helper()
	s, err := claimstore.Open(dir)
	if err != nil {
		t.Fatalf("claimstore.Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func podSettings(s *claimstore.Store, uid string) enroll.SettingsOverride {
	o, _ := s.PodSettings(&enroll.Pod{UID: uid}, enroll.PodInfo{})
	return o
}

func boolp(p *bool) string {
	if p == nil {
		return "nil"
	}
	return map[bool]string{true: "true", false: "false"}[*p]
}
