package kubectlmeshlet

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBugReport: the archive's files (golden list), each node's report
// as meshlet printed it, the settings' ConfigMaps the DaemonSet names
// (one missing: in errors.txt), only the mesh's events cluster-wide, and
// no Secret.
func TestBugReport(t *testing.T) {
	tc := twoNodeCluster(t)
	file := filepath.Join(t.TempDir(), "report.tar.gz")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"bug-report", "-f", file}, &out, &out, tc.connect); code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if strings.TrimSpace(out.String()) != file {
		t.Errorf("printed %q, want the archive's path %s", out.String(), file)
	}
	files, err := ReadBugReport(file)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	golden(t, "bug-report-files.golden", strings.Join(names, "\n")+"\n")

	if got := files["report/status/node-b_meshlet-system_meshlet-node-b.json"]; got != string(reportJSON(t, cniReport("node-b"))) {
		t.Errorf("node-b's status is not meshlet's output as printed:\n%s", got)
	}
	if got := files["report/errors.txt"]; !strings.Contains(got, "ConfigMap shop/extra-settings") {
		t.Errorf("errors.txt does not name the missing ConfigMap:\n%s", got)
	}
	if mesh := files["report/events/mesh.yaml"]; !strings.Contains(mesh, "MeshEnrollFailed") || strings.Contains(mesh, "Scheduled") {
		t.Errorf("events/mesh.yaml holds other events than the mesh's:\n%s", mesh)
	}
	for name, data := range files {
		if strings.Contains(data, "s3cret") || strings.Contains(data, "meshlet-token") {
			t.Errorf("%s holds the Secret", name)
		}
	}
}
