// Package demotest runs a demo as a test: its story goes to a buffer, and
// the test checks that the demo succeeded and told what it must.
package demotest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/examples/internal/narrate"
)

// Tell points the demo's story (*story) at a buffer, runs the demo and
// checks that it exited 0, told each of wants and saw nothing UNEXPECTED.
// The story is logged whatever happens.
func Tell(t *testing.T, name string, story **narrate.Narrator, run func() int, wants ...string) {
	t.Helper()
	var b bytes.Buffer
	*story = narrate.New(name, &b, &b)
	rc := run()
	t.Logf("make %s told:\n%s", name, b.String())
	if rc != 0 {
		t.Fatalf("the demo exited %d", rc)
	}
	for _, want := range wants {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the demo did not tell %q", want)
		}
	}
	if strings.Contains(b.String(), "UNEXPECTED") {
		t.Error("the demo saw something unexpected")
	}
}
