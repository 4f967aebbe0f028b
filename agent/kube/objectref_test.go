package kube

import "testing"

func TestConfigMapFlag(t *testing.T) {
	var refs []ObjectRef
	v := ObjectRefList{&refs}
	for _, arg := range []string{"meshlet/base", "meshlet/a,istio-system/b"} {
		if err := v.Set(arg); err != nil {
			t.Fatal(err)
		}
	}
	if v.String() != "meshlet/base,meshlet/a,istio-system/b" {
		t.Fatalf("refs %s", v)
	}
	for _, bad := range []string{"base", "Meshlet/base", "meshlet/Base_1", "/base"} {
		if err := (ObjectRefList{&refs}).Set(bad); err == nil {
			t.Errorf("--config-map=%s accepted", bad)
		}
	}
}
