package kube

import "testing"

func TestSameAnnotationsIgnoresMeshletsStatus(t *testing.T) {
	for _, tc := range []struct {
		a, b map[string]string
		same bool
	}{
		{nil, map[string]string{}, true},
		{nil, map[string]string{RedirectionAnnotation: "enabled"}, true},
		{map[string]string{RedirectionAnnotation: "pending"}, map[string]string{RedirectionAnnotation: "enabled"}, true},
		{map[string]string{"x": "1", RedirectionAnnotation: "enabled"}, map[string]string{"x": "1"}, true},
		{map[string]string{"x": "1"}, map[string]string{"x": "2"}, false},
		{map[string]string{"x": "1"}, map[string]string{"x": "1", "y": ""}, false},
		{map[string]string{"x": "1", "y": ""}, map[string]string{"x": "1", RedirectionAnnotation: "enabled"}, false},
	} {
		if got := sameAnnotations(tc.a, tc.b); got != tc.same {
			t.Errorf("sameAnnotations(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
		if got := sameAnnotations(tc.b, tc.a); got != tc.same {
			t.Errorf("sameAnnotations(%v, %v) = %v, want %v", tc.b, tc.a, got, tc.same)
		}
	}
}

func TestStatusRemoved(t *testing.T) {
	for _, tc := range []struct {
		old, cur map[string]string
		removed  bool
	}{
		{map[string]string{RedirectionAnnotation: "enabled"}, nil, true},
		{map[string]string{RedirectionAnnotation: "enabled", "x": "1"}, map[string]string{"x": "1"}, true},
		{nil, map[string]string{RedirectionAnnotation: "enabled"}, false},
		{map[string]string{RedirectionAnnotation: "pending"}, map[string]string{RedirectionAnnotation: "enabled"}, false},
		{nil, nil, false},
	} {
		if got := statusRemoved(tc.old, tc.cur); got != tc.removed {
			t.Errorf("statusRemoved(%v, %v) = %v, want %v", tc.old, tc.cur, got, tc.removed)
		}
	}
}
