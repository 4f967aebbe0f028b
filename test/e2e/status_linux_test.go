package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/nodestatus"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/test/env"
)

// statusRun is one meshlet status: its exit status, its output and, for
// -o json, the report decoded.
type statusRun struct {
	code   int
	out    string
	report nodestatus.Report
}

// meshletStatus runs the meshlet binary's status command with args and,
// unless args ask for another output, -o json.
func meshletStatus(t *testing.T, e *env.Env, args ...string) statusRun {
	t.Helper()
	asJSON := !strings.Contains(strings.Join(args, " "), "-o ") && !strings.Contains(strings.Join(args, " "), "--brief")
	if asJSON {
		args = append(args, "-o", "json")
	}
	cmd := exec.Command(e.Meshlet, append([]string{"status", "--state-dir=" + e.MeshletStateDir()}, args...)...)
	// The harness's MESHLET_* variables are no settings of meshlet's.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "MESHLET_") })
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	r := statusRun{out: out.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if stderr.Len() > 0 {
		t.Fatalf("meshlet status %s wrote to stderr: %s", strings.Join(args, " "), stderr.String())
	}
	if asJSON {
		if err := json.Unmarshal(out.Bytes(), &r.report); err != nil {
			t.Fatalf("meshlet status -o json: %v:\n%s", err, out.String())
		}
	}
	return r
}

// waitStatus runs meshlet status until ok says it shows what the test
// waits for (meshlet's state changes after the event that causes it).
func waitStatus(t *testing.T, e *env.Env, what string, ok func(statusRun) bool, args ...string) statusRun {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := meshletStatus(t, e, args...)
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("meshlet status never showed %s; last (exit %d):\n%s", what, r.code, r.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStatus: meshlet status, against a real daemon and runtime, in each
// state a node can be in, says READY only when the node takes mesh pods,
// exits 0 only then and with no failed mesh pod, and lists the pods with
// a network namespace path nsenter takes.
func TestStatus(t *testing.T) {
	e := theEnv(t)

	t.Run("no meshlet", func(t *testing.T) {
		r := meshletStatus(t, e)
		if r.code != 1 || r.report.Status != nodestatus.StatusNotReady || r.report.Summary != nil || !strings.Contains(r.report.Detail, "no meshlet serves this node") {
			t.Fatalf("status without a meshlet: exit %d, %+v", r.code, r.report)
		}
	})

	t.Run("no runtime", func(t *testing.T) {
		// The runtime's NRI socket answers nowhere: nothing would enroll
		// a new pod.
		dir := t.TempDir()
		healthSocket := filepath.Join(dir, "health.sock")
		ml, err := e.StartMeshlet(filepath.Join(zdstest.SocketDir(t), "zt.sock"), "--standalone", "--mode=nri", "--nri-socket="+filepath.Join(dir, "nri.sock"),
			"--health-socket="+healthSocket)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := ml.Stop(); err != nil {
				t.Error(err)
			}
		}()
		// Until the pod source has picked NRI, the hook says "choosing".
		r := waitStatus(t, e, "the NRI hook picked", func(r statusRun) bool {
			return r.report.Summary != nil && r.report.Summary.RuntimeHook.Mode == "nri"
		})
		s := r.report.Summary
		if r.code != 1 || r.report.Status != nodestatus.StatusNotReady || s.RuntimeHook.Connected || s.RuntimeHook.Mode != "nri" ||
			!strings.Contains(r.report.Detail, "not connected to the container runtime") {
			t.Fatalf("status without a runtime: exit %d, %+v, summary %+v", r.code, r.report, s)
		}
		// As in the DaemonSet: this meshlet's own /readyz says why.
		for _, args := range [][]string{{"--brief"}, {"--brief", "--health-socket=" + healthSocket}} {
			brief := meshletStatus(t, e, args...)
			if brief.code != 1 || brief.out != "NOT READY: not ready: not connected to the container runtime (NRI)\n" {
				t.Fatalf("status %v without a runtime: exit %d, %q", args, brief.code, brief.out)
			}
		}
	})

	m := startMeshIn(t, e)
	meshPod := runPodIn(t, e, "app", ambient, false)
	plain := runPodIn(t, e, "app", nil, false)

	t.Run("ready", func(t *testing.T) {
		r := waitStatus(t, e, "the mesh pod enrolled", func(r statusRun) bool { return len(r.report.Pods) == 1 })
		s := r.report.Summary
		if r.code != 0 || !r.report.Healthy || r.report.Status != nodestatus.StatusReady || s == nil || !s.Mesh.Ready || !s.RuntimeHook.Connected ||
			s.Ztunnel.Connections != 1 || s.API.Enabled || s.PodCounts["enrolled"] != 1 || s.PodCounts["skipped"] < 1 {
			t.Fatalf("status on a ready node: exit %d, %+v, summary %+v", r.code, r.report, s)
		}
		p := r.report.Pods[0]
		if p.UID != meshPod.spec.UID || p.State != "enrolled" || p.Ztunnel != "acked" || p.NetnsInode != inode(t, meshPod.info.NetnsPath) {
			t.Fatalf("status lists %+v, want the mesh pod enrolled and acked", p)
		}
		// The path it gives is the pod's network namespace, one nsenter
		// takes.
		if p.Netns == "" || inode(t, p.Netns) != p.NetnsInode {
			t.Fatalf("the mesh pod's netns path %q is not its namespace %d", p.Netns, p.NetnsInode)
		}
		if out, err := exec.Command("nsenter", "--net="+p.Netns, "nft", "list", "table", "inet", "meshlet").CombinedOutput(); err != nil {
			t.Fatalf("nsenter --net=%s: %v: %s", p.Netns, err, out)
		}
		// Skipped pods only with --all; filters by namespace and state.
		all := meshletStatus(t, e, "--all", "--namespace=app")
		if len(all.report.Pods) != 2 || all.report.Pods[0].UID != meshPod.spec.UID || all.report.Pods[1].UID != plain.spec.UID {
			t.Fatalf("status --all --namespace=app lists %+v, want the mesh pod then the skipped one", all.report.Pods)
		}
		if skipped := meshletStatus(t, e, "--state=skipped", "--namespace=app"); len(skipped.report.Pods) != 1 || skipped.report.Pods[0].UID != plain.spec.UID {
			t.Fatalf("status --state=skipped lists %+v", skipped.report.Pods)
		}
		table := meshletStatus(t, e, "-o", "table")
		for _, want := range []string{"READY", "Runtime hook:", "NRI, connected", "1 connection(s)", "1 enrolled", meshPod.spec.Name, p.Netns} {
			if !strings.Contains(table.out, want) || table.code != 0 {
				t.Fatalf("status (exit %d) lacks %q:\n%s", table.code, want, table.out)
			}
		}
	})

	t.Run("standby", func(t *testing.T) {
		// A second meshlet on the node, as a surge update starts one: it
		// waits for the node lock and says so on its own health socket.
		healthSocket := filepath.Join(t.TempDir(), "health.sock")
		second, err := e.StartMeshlet(m.socket, "--standalone", "--health-socket="+healthSocket, "--health-addr=127.0.0.1:9890", "--metrics-addr=127.0.0.1:9891")
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := second.Stop(); err != nil {
				t.Error(err)
			}
		}()
		r := waitStatus(t, e, "STANDBY", func(r statusRun) bool { return r.report.Status == nodestatus.StatusStandby }, "--health-socket="+healthSocket)
		if r.code != 0 || !r.report.Healthy || r.report.Summary == nil || len(r.report.Pods) != 1 {
			t.Fatalf("status of a ready standby beside a ready meshlet: exit %d, %+v", r.code, r.report)
		}
	})

	t.Run("no ztunnel", func(t *testing.T) {
		m.zt.Stop()
		r := waitStatus(t, e, "no ztunnel", func(r statusRun) bool { return r.report.Summary != nil && r.report.Summary.Ztunnel.Connections == 0 })
		if r.code != 1 || r.report.Status != nodestatus.StatusNotReady || r.report.Summary.Mesh.Reason != "ztunnel-disconnected" ||
			!strings.Contains(r.report.Detail, "no ztunnel is connected") {
			t.Fatalf("status without ztunnel: exit %d, %+v", r.code, r.report)
		}
		// The enrolled pod keeps its enrollment, queued for the next one.
		if len(r.report.Pods) != 1 || r.report.Pods[0].Ztunnel != "queued" {
			t.Fatalf("the mesh pod without ztunnel: %+v", r.report.Pods)
		}
	})

	t.Run("a failed pod", func(t *testing.T) {
		// ztunnel refuses one new pod: its enrollment fails in the hook.
		m.connectZtunnelDeciding(func(r *zdstest.Request) string {
			if r.Kind == zdstest.Add && strings.Contains(r.Info.GetName(), "refused") {
				return "failed to create inpod proxy"
			}
			return ""
		})
		spec := env.PodSpec{Name: "refused", Namespace: "app", UID: "uid-status-refused", Labels: ambient}
		if id, err := e.RunPod(spec); err == nil {
			_ = e.RemovePod(id)
			t.Fatalf("a pod ztunnel refused started")
		}
		// The runtime removed the sandbox at once: the pod is in no list
		// of the node's pods, and the node is not OK until it starts.
		r := meshletStatus(t, e)
		if r.code != 1 || r.report.Healthy || r.report.Status != nodestatus.StatusReady || len(r.report.Summary.RecentFailures) != 1 ||
			r.report.Summary.RecentFailures[0].UID != spec.UID || !strings.Contains(r.report.Summary.RecentFailures[0].Reason, "failed to create inpod proxy") ||
			!strings.Contains(strings.Join(r.report.Problems, "\n"), "app/refused (1 attempt(s)") {
			t.Fatalf("status after a pod failed to enroll: exit %d, %+v", r.code, r.report)
		}
		// The kubelet's next attempt, with ztunnel taking the pod, clears it.
		m.zt.Stop()
		m.connectZtunnel()
		id, err := e.RunPod(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.RemovePod(id) })
		if r := meshletStatus(t, e); r.code != 0 || len(r.report.Summary.RecentFailures) != 0 || len(r.report.Pods) != 2 {
			t.Fatalf("status once the pod enrolled: exit %d, %+v", r.code, r.report)
		}
	})
}

// TestLogFormatJSON: with --log-format=json (or MESHLET_LOG_FORMAT=json)
// meshlet logs one JSON object per line, as Kubernetes components do.
func TestLogFormatJSON(t *testing.T) {
	e := theEnv(t)
	for _, c := range []struct {
		args []string
		env  string
	}{{[]string{"--log-format=json", "version"}, ""}, {[]string{"version"}, "MESHLET_LOG_FORMAT=json"}} {
		cmd := exec.Command(e.Meshlet, c.args...)
		// A misspelt variable: meshlet warns about it in the log.
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "MESHLET_") }), "MESHLET_ZTUNEL_SOCKET=/x")
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("meshlet %v: %v: %s", c.args, err, stderr.String())
		}
		var line struct {
			TS         float64 `json:"ts"`
			Msg        string  `json:"msg"`
			V          *int    `json:"v"`
			Variable   string  `json:"variable"`
			DidYouMean string  `json:"didYouMean"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(stderr.Bytes()), &line); err != nil || line.TS == 0 || line.V == nil ||
			!strings.Contains(line.Msg, "unknown environment variable") || line.Variable != "MESHLET_ZTUNEL_SOCKET" || line.DidYouMean != "MESHLET_ZTUNNEL_SOCKET" {
			t.Fatalf("meshlet %v %s logged %q (%v), want one JSON object with ts, v, msg and the variable", c.args, c.env, stderr.String(), err)
		}
	}
}
