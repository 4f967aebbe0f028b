package flagvalue_test

import (
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/meshlet/meshlet/internal/flagvalue"
)

// TestListReplacesTheDefault: a list given replaces the default rather
// than adding to it; blanks around and between items are dropped.
func TestListReplacesTheDefault(t *testing.T) {
	got := []string{"kube-system"}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(flagvalue.NewList(&got), "excluded", "")
	if s := fs.Lookup("excluded").Value.String(); s != "kube-system" {
		t.Fatalf("default shown as %q", s)
	}
	if err := fs.Parse([]string{"--excluded= batch, ,infra,"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"batch", "infra"}) {
		t.Fatalf("list %q, want [batch infra]", got)
	}
	if err := fs.Set("excluded", ""); err != nil || len(got) != 0 {
		t.Fatalf("an empty list: %q, %v; want none", got, err)
	}
}
