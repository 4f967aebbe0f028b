package kubectlmeshlet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/nodestatus"
)

// TestMergeReports: a node whose meshlet status exits 1 with its report
// is a result; failed pods (listed, and only in the recent failures) are
// gathered across nodes; a meshlet pod that cannot be asked makes the
// cluster unhealthy; skipped pods stay only with --all.
func TestMergeReports(t *testing.T) {
	tc := twoNodeCluster(t)
	cs, err := clusterStatus(context.Background(), tc.cluster(""), "", false)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Healthy {
		t.Error("healthy with node-b not ready and node-c not asked")
	}
	var nodes []string
	for _, nr := range cs.Nodes {
		nodes = append(nodes, nr.Node)
	}
	if got := strings.Join(nodes, ","); got != "node-a,node-b,node-c" {
		t.Errorf("nodes %s, want node-a,node-b,node-c", got)
	}
	var failed []string
	for _, p := range cs.FailedPods {
		failed = append(failed, p.Node+":"+p.Name)
	}
	if got := strings.Join(failed, ","); got != "node-b:cart-6,node-b:cart-7" {
		t.Errorf("failed pods %s, want node-b:cart-6,node-b:cart-7 (listed, and a recent failure only)", got)
	}
	if len(cs.Unreached) != 1 || cs.Unreached[0].Node != "node-c" || !strings.Contains(cs.Unreached[0].Error, "CrashLoopBackOff") {
		t.Errorf("unreached %+v, want node-c's crash-looping meshlet", cs.Unreached)
	}
	for _, p := range cs.Nodes[0].Report.Pods {
		if p.State == "skipped" {
			t.Errorf("skipped pod %s kept without --all", p.Name)
		}
	}
	all, _ := clusterStatus(context.Background(), tc.cluster(""), "", true)
	if n := len(all.Nodes[0].Report.Pods); n != 3 {
		t.Errorf("--all: node-a has %d pods, want 3 (2 enrolled, 1 skipped)", n)
	}

	healthy := mergeReports([]NodeReport{{Node: "a", Report: &nodestatus.Report{Status: "READY", Healthy: true}},
		{Node: "a", Report: &nodestatus.Report{Status: "STANDBY", Healthy: true}}}, false)
	if !healthy.Healthy {
		t.Error("a ready node with a ready standby (an update's surge) is not healthy")
	}
	if mergeReports(nil, false).Healthy {
		t.Error("no report at all is healthy")
	}
}

// TestAskNode: exit status 1 with a report is a result; without one, an
// error naming the last line meshlet printed; an exec error is the node's
// error.
func TestAskNode(t *testing.T) {
	p := meshletPodOn("n", "img")
	for _, tc := range []struct {
		name      string
		res       execResult
		err       error
		wantError string
	}{
		{name: "healthy", res: execResult{Stdout: reportJSON(t, readyReport("n", 1))}},
		{name: "not ok, exit 1", res: execResult{Stdout: reportJSON(t, cniReport("n")), ExitCode: 1}},
		{name: "old meshlet", res: execResult{Stderr: []byte("meshlet: unknown flag --all\nRun 'meshlet --help' for usage.\n"), ExitCode: 2},
			wantError: "meshlet status exited 2 without a report: Run 'meshlet --help' for usage."},
		{name: "exec refused", err: errors.New("exec in meshlet-system/m: pods \"m\" is forbidden"), wantError: "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := fakeExec{results: map[string]execResult{p.Name: tc.res}, errs: map[string]error{}}
			if tc.err != nil {
				ex.errs[p.Name] = tc.err
			}
			nr := askNode(context.Background(), ex, p)
			if tc.wantError == "" {
				if nr.Report == nil || nr.Error != "" {
					t.Fatalf("got error %q, want a report", nr.Error)
				}
				return
			}
			if nr.Report != nil || !strings.Contains(nr.Error, tc.wantError) {
				t.Fatalf("got report %v, error %q; want error %q", nr.Report, nr.Error, tc.wantError)
			}
		})
	}
}

// TestStatusTable: the table, with and without --all (golden files).
func TestStatusTable(t *testing.T) {
	for _, all := range []bool{false, true} {
		cs, err := clusterStatus(context.Background(), twoNodeCluster(t).cluster(""), "", all)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		printStatus(&b, cs, all, testNow)
		name := "status.golden"
		if all {
			name = "status-all.golden"
		}
		golden(t, name, b.String())
	}
}

// TestStatusCommand: exit statuses, --node, and -o json carrying every
// node's report.
func TestStatusCommand(t *testing.T) {
	tc := twoNodeCluster(t)
	for _, c := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"status"}, ExitFindings, "node-b"},
		{[]string{"status", "--node", "node-a"}, ExitOK, "READY"},
		{[]string{"--node=node-b", "status", "-o", "yaml"}, ExitFindings, "status: NOT READY"},
		{[]string{"status", "--node", "node-x"}, ExitError, ""},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), c.args, &out, &errOut, tc.connect)
		if code != c.wantCode || !strings.Contains(out.String(), c.wantOut) {
			t.Errorf("%v: exit %d, output:\n%s%s\nwant exit %d and %q", c.args, code, out.String(), errOut.String(), c.wantCode, c.wantOut)
		}
	}
	var out bytes.Buffer
	run(context.Background(), []string{"status", "-o", "json"}, &out, &out, tc.connect)
	var cs ClusterStatus
	if err := json.Unmarshal(out.Bytes(), &cs); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out.String())
	}
	if len(cs.Nodes) != 3 || cs.Nodes[0].Report == nil || cs.Nodes[0].Report.Summary.Version != "v0.3.0" {
		t.Errorf("-o json: %+v, want 3 nodes, node-a's report with its version", cs.Nodes)
	}
}
