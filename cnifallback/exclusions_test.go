package cnifallback

import (
	"slices"
	"testing"
)

type recordingInstaller struct{ lists [][]string }

var _ exclusionsInstaller = (*recordingInstaller)(nil)

func (r *recordingInstaller) SetExcludeNamespaces(ns []string) bool {
	r.lists = append(r.lists, slices.Clone(ns))
	return true
}

// TestCNIExclusionsFollowTheNodeSettings: meshlet-cni's excluded
// namespaces are the node settings' (with ztunnel's namespace), whether
// they change before CNI mode's installer exists or after.
func TestCNIExclusionsFollowTheNodeSettings(t *testing.T) {
	given := []string{"kube-system"}
	c := NewExclusions("istio-system", given)
	given[0] = "changed-by-the-caller"
	c.SetExcludedNamespaces([]string{"kube-system", "batch"}) // before CNI mode
	in := &recordingInstaller{}
	c.Attach(in)
	c.SetExcludedNamespaces([]string{"batch"})
	want := [][]string{{"kube-system", "batch", "istio-system"}, {"batch", "istio-system"}}
	if !slices.EqualFunc(in.lists, want, slices.Equal[[]string]) {
		t.Fatalf("installer given %q, want %q", in.lists, want)
	}
	if c := NewExclusions("istio-system", given); !slices.Equal(c.entry(), []string{"changed-by-the-caller", "istio-system"}) {
		t.Fatalf("entry %q", c.entry())
	}
}
