package kube

import "testing"

func TestLeadingInt(t *testing.T) {
	for in, want := range map[string]int{"37": 37, "37+": 37, "1": 1, "": -1, "+": -1, "30-gke": 30} {
		if got := leadingInt(in); got != want {
			t.Errorf("leadingInt(%q) = %d, want %d", in, got, want)
		}
	}
}
