package kubectlmeshlet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/nodestatus"
)

// execTimeout bounds each node's meshlet status: it answers in
// milliseconds unless the node is in trouble.
const execTimeout = 30 * time.Second

// execParallel is how many nodes are asked at once.
const execParallel = 8

// NodeReport is one meshlet pod's answer: its report, or why there is
// none.
type NodeReport struct {
	Node string `json:"node"`
	// Pod is the meshlet pod asked, NAMESPACE/NAME.
	Pod string `json:"pod"`
	// Report is what meshlet status -o json --all printed (nil: Error
	// says why there is none).
	Report *nodestatus.Report `json:"report,omitempty"`
	// Raw is that output as printed (for bug-report).
	Raw []byte `json:"-"`
	// Error is why the node's meshlet could not be asked.
	Error string `json:"error,omitempty"`
}

// collectReports asks meshlet in each of pods (concurrently) for its
// report.
func collectReports(ctx context.Context, ex podExec, pods []corev1.Pod) []NodeReport {
	reports := make([]NodeReport, len(pods))
	sem := make(chan struct{}, execParallel)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			reports[i] = askNode(ctx, ex, &pods[i])
		})
	}
	wg.Wait()
	return reports
}

// askNode runs meshlet status in p's meshlet container. Its exit status 1
// (the node is not OK) comes with the report: a result, not an error.
func askNode(ctx context.Context, ex podExec, p *corev1.Pod) NodeReport {
	nr := NodeReport{Node: p.Spec.NodeName, Pod: p.Namespace + "/" + p.Name}
	if why := notRunning(p); why != "" {
		nr.Error = why
		return nr
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	res, err := ex.Exec(ctx, p.Namespace, p.Name, meshletContainer(&p.Spec).Name, statusCommandLine)
	if err != nil {
		nr.Error = err.Error()
		return nr
	}
	nr.Raw = res.Stdout
	var r nodestatus.Report
	if err := json.Unmarshal(res.Stdout, &r); err != nil || r.Status == "" {
		nr.Error = fmt.Sprintf("meshlet status exited %d without a report: %s", res.ExitCode, lastLine(res.Stderr, res.Stdout))
		return nr
	}
	klog.FromContext(ctx).V(2).Info("Asked meshlet", "pod", nr.Pod, "node", nr.Node, "exitCode", res.ExitCode, "status", r.Status)
	nr.Report = &r
	return nr
}

// lastLine is the last non-empty line of the first output that has one:
// where a command says why it failed.
func lastLine(outputs ...[]byte) string {
	for _, out := range outputs {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
			return l
		}
	}
	return "no output"
}

// ClusterStatus is kubectl meshlet status's result: every node's report
// merged.
type ClusterStatus struct {
	// Healthy: every meshlet pod answered, healthy.
	Healthy bool `json:"healthy"`
	// Nodes are the reports, by node.
	Nodes []NodeReport `json:"nodes"`
	// FailedPods are the mesh pods that failed, across nodes.
	FailedPods []NodePod `json:"failedPods"`
	// Unreached are the meshlet pods that could not be asked.
	Unreached []NodeReport `json:"unreached"`
}

// NodePod is a pod of a node's report.
type NodePod struct {
	Node string `json:"node"`
	nodestatus.Pod
}

// mergeReports merges the nodes' reports. Without all, each report keeps
// the pods meshlet status shows without --all (skipped ones dropped).
func mergeReports(reports []NodeReport, all bool) ClusterStatus {
	cs := ClusterStatus{Healthy: len(reports) > 0, Nodes: []NodeReport{}, FailedPods: []NodePod{}, Unreached: []NodeReport{}}
	for _, nr := range reports {
		if nr.Report == nil {
			cs.Healthy = false
			cs.Unreached = append(cs.Unreached, nr)
			cs.Nodes = append(cs.Nodes, nr)
			continue
		}
		r := *nr.Report
		if !all {
			r.Pods = slices.DeleteFunc(slices.Clone(r.Pods), func(p nodestatus.Pod) bool { return p.State == "skipped" })
		}
		nr.Report = &r
		cs.Healthy = cs.Healthy && r.Healthy
		for _, p := range r.Pods {
			if p.State == "failed" {
				cs.FailedPods = append(cs.FailedPods, NodePod{Node: nr.Node, Pod: p})
			}
		}
		// A pod whose sandbox the runtime removed on a failed enrollment
		// is in the recent failures only.
		if r.Summary != nil {
			for _, f := range r.Summary.RecentFailures {
				if !slices.ContainsFunc(r.Pods, func(p nodestatus.Pod) bool { return p.UID == f.UID && p.State == "failed" }) {
					cs.FailedPods = append(cs.FailedPods, NodePod{Node: nr.Node, Pod: nodestatus.Pod{Namespace: f.Namespace, Name: f.Name,
						UID: f.UID, State: "failed", Since: f.At, Reason: f.Reason, Retries: f.Attempts}})
				}
			}
		}
		cs.Nodes = append(cs.Nodes, nr)
	}
	slices.SortStableFunc(cs.Nodes, func(a, b NodeReport) int { return strings.Compare(a.Node, b.Node) })
	slices.SortStableFunc(cs.FailedPods, func(a, b NodePod) int {
		return strings.Compare(a.Node+"/"+a.Namespace+"/"+a.Name, b.Node+"/"+b.Namespace+"/"+b.Name)
	})
	return cs
}
