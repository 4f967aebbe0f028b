package kubectlmeshlet

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersion: the chart's labels, each node's image and ID, and node-c
// marked: it runs another image than the DaemonSet's template.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &out, twoNodeCluster(t).connect); code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	// The first line is the client's version, which the build decides.
	_, table, _ := strings.Cut(out.String(), "\n")
	golden(t, "version.golden", table)
}
