package debug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/nodestatus"
	"github.com/meshlet/meshlet/internal/httpserve"
)

// ErrNotHealthy is meshlet status's result when the node is not OK: not
// ready, no meshlet serving it, or a mesh pod failed. The report, printed,
// says why.
var ErrNotHealthy = errors.New("the node's mesh is not healthy")

// errNotFound is a debug socket's answer to an endpoint it does not serve.
var errNotFound = errors.New("not served")

// Outputs are meshlet status's -o values.
var Outputs = []string{"table", "json", "yaml"}

// StatusOptions select what meshlet status asks and prints.
type StatusOptions struct {
	// StateDir holds the serving meshlet's debug socket (--state-dir).
	StateDir string
	// HealthSocket is this meshlet's /readyz (--health-socket; a pod's
	// own in the DaemonSet); "": the serving meshlet's answer is used.
	HealthSocket string
	// Output is one of Outputs ("": table).
	Output string
	// Brief prints one line: the status and why.
	Brief bool
	// All shows skipped pods too; Namespace and States keep only the
	// pods in that namespace and those states.
	All       bool
	Namespace string
	States    []string
}

// Validate refuses an output or a pod state meshlet status does not know,
// naming its flag.
func (opts StatusOptions) Validate() error {
	if !slices.Contains(append(Outputs, ""), opts.Output) {
		return fmt.Errorf("-o=%q: want one of %s", opts.Output, strings.Join(Outputs, ", "))
	}
	for _, s := range opts.States {
		if !slices.Contains(nodestatus.PodStates, s) {
			return fmt.Errorf("--state=%s: want one of %s", s, strings.Join(nodestatus.PodStates, ", "))
		}
	}
	return nil
}

// Status asks the node's meshlet how the node stands and prints it (meshlet
// status). It returns ErrNotHealthy, after printing, when the node is
// not OK.
func Status(ctx context.Context, opts StatusOptions, w io.Writer) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	r := Ask(ctx, opts)
	var err error
	switch {
	case opts.Output == "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	case opts.Output == "yaml":
		var b []byte
		if b, err = yaml.Marshal(r); err == nil {
			_, err = w.Write(b)
		}
	case opts.Brief:
		err = printBrief(w, r)
	default:
		err = printReport(w, r, time.Now())
	}
	if err != nil {
		return err
	}
	if !r.Healthy {
		return ErrNotHealthy
	}
	return nil
}

// Ask builds the report: this meshlet's /readyz (opts.HealthSocket), and
// the serving meshlet's summary, pods and settings from its debug socket.
func Ask(ctx context.Context, opts StatusOptions) nodestatus.Report {
	socket := filepath.Join(opts.StateDir, SocketName)
	r := nodestatus.Report{Pods: []nodestatus.Pod{}}
	var summary nodestatus.Summary
	older := false
	switch err := getDebug(ctx, socket, "/debug/status", &summary); {
	case errors.Is(err, errNotFound):
		// A meshlet from before /debug/status serves the node (an update
		// is under way): its pods and settings are still there.
		older = true
		r.Problems = append(r.Problems, "the meshlet serving this node is an older version, without a summary (/debug/status)")
	case err != nil:
		r.Problems = append(r.Problems, "no meshlet serves this node: "+err.Error())
	default:
		r.Summary = &summary
	}
	// This meshlet's own readiness: its health socket (a standby has its
	// own), else the serving meshlet's.
	switch {
	case opts.HealthSocket != "":
		r.Status, r.Detail = readyz(ctx, opts.HealthSocket)
	case r.Summary == nil:
		r.Status, r.Detail = nodestatus.StatusNotReady, r.Problems[len(r.Problems)-1]
	case r.Summary.Ready:
		r.Status, r.Detail = nodestatus.StatusReady, r.Summary.Detail
	default:
		r.Status, r.Detail = nodestatus.StatusNotReady, r.Summary.Detail
	}
	switch s := r.Summary; {
	case s == nil:
	case r.Status == nodestatus.StatusNotReady:
		r.Problems = append(r.Problems, "not ready: "+r.Detail)
	case r.Status == nodestatus.StatusReady && !s.Mesh.Ready:
		// meshlet serves, but the node's mesh takes no new pods (no
		// ztunnel): what the node's taints say.
		r.Status, r.Detail = nodestatus.StatusNotReady, s.Mesh.Message
		r.Problems = append(r.Problems, "not ready: "+r.Detail)
	case r.Status == nodestatus.StatusStandby && !s.Ready:
		r.Problems = append(r.Problems, "the meshlet serving the node is not ready: "+s.Detail)
	case r.Status == nodestatus.StatusStandby && !s.Mesh.Ready:
		r.Problems = append(r.Problems, "the node's mesh takes no new pods: "+s.Mesh.Message)
	}
	if r.Summary != nil || older {
		r.Pods, r.Settings, r.Problems = readPods(ctx, socket, opts, r.Summary, r.Problems)
	}
	r.Healthy = len(r.Problems) == 0
	return r
}

// readPods reads the pods and the settings from the debug socket, and adds
// the failed pods, and those failed recently, to problems.
func readPods(ctx context.Context, socket string, opts StatusOptions, summary *nodestatus.Summary, problems []string) ([]nodestatus.Pod, *live.Report, []string) {
	selected := []nodestatus.Pod{}
	var pods debugPods
	if err := getDebug(ctx, socket, "/debug/pods", &pods); err != nil {
		problems = append(problems, err.Error())
	} else {
		selected = selectPods(pods.Pods, opts)
		if failed := failedPods(pods.Pods); len(failed) > 0 {
			problems = append(problems, fmt.Sprintf("%d mesh pod(s) failed: %s", len(failed), strings.Join(failed, "; ")))
		}
	}
	if summary != nil && len(summary.RecentFailures) > 0 {
		var names []string
		for _, f := range summary.RecentFailures {
			if slices.ContainsFunc(pods.Pods, func(p nodestatus.Pod) bool { return p.UID == f.UID && p.State == "failed" }) {
				continue // named above
			}
			names = append(names, fmt.Sprintf("%s/%s (%d attempt(s), last %s ago): %s", f.Namespace, f.Name, f.Attempts, age(time.Since(f.At)), f.Reason))
		}
		if len(names) > 0 {
			problems = append(problems, fmt.Sprintf("%d mesh pod(s) could not start in the last %v: %s", len(names), nodestatus.FailureWindow, strings.Join(names, "; ")))
		}
	}
	var settings live.Report
	if err := getDebug(ctx, socket, "/debug/settings", &settings); err != nil {
		return selected, nil, append(problems, err.Error())
	}
	return selected, &settings, problems
}

// readyz is this meshlet's /readyz as a status and its detail.
func readyz(ctx context.Context, socket string) (status, detail string) {
	ready, detail, err := health.Readyz(ctx, socket)
	switch {
	case err != nil:
		return nodestatus.StatusNotReady, "this meshlet's health socket does not answer: " + err.Error()
	case !ready:
		return nodestatus.StatusNotReady, detail
	case detail == health.StandbyDetail:
		return nodestatus.StatusStandby, detail
	}
	return nodestatus.StatusReady, detail
}

// failedPods names the failed pods and why.
func failedPods(pods []nodestatus.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.State == "failed" {
			out = append(out, fmt.Sprintf("%s/%s: %s", p.Namespace, p.Name, p.Reason))
		}
	}
	return out
}

// stateOrder sorts pods: failed first, then enrolled, then the others.
func stateOrder(state string) int {
	if i := slices.Index(nodestatus.PodStates, state); i >= 0 {
		return i
	}
	return len(nodestatus.PodStates)
}

// selectPods keeps the pods opts asks for, failed first, then enrolled.
func selectPods(pods []nodestatus.Pod, opts StatusOptions) []nodestatus.Pod {
	out := []nodestatus.Pod{}
	for _, p := range pods {
		switch {
		case opts.Namespace != "" && p.Namespace != opts.Namespace:
		case len(opts.States) > 0 && !slices.Contains(opts.States, p.State):
		case len(opts.States) == 0 && !opts.All && p.State == "skipped":
		default:
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b nodestatus.Pod) int { return stateOrder(a.State) - stateOrder(b.State) })
	return out
}

// getDebug reads one of the debug socket's JSON answers into v.
func getDebug(ctx context.Context, socket, endpoint string, v any) error {
	answer, err := httpserve.Get(ctx, socket, endpoint, 5*time.Second, 64<<20)
	if err != nil {
		return fmt.Errorf("ask the running meshlet at %s (is it running, with this --state-dir?): %w", socket, err)
	}
	if answer.Status == "404 Not Found" {
		return fmt.Errorf("%s %s: %w", socket, endpoint, errNotFound)
	}
	if !answer.OK {
		return fmt.Errorf("%s %s: %s", socket, endpoint, answer.Status)
	}
	if err := json.Unmarshal(answer.Body, v); err != nil {
		return fmt.Errorf("decode %s: %w", endpoint, err)
	}
	return nil
}
