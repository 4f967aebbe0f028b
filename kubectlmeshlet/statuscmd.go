package kubectlmeshlet

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/spf13/pflag"
)

var statusCommand = command{
	name:    "status",
	summary: "every node's mesh as its meshlet sees it; exit status 0 only when all are healthy",
	help: `status runs 'meshlet status -o json --all' in each meshlet pod's meshlet container (the API
server's pods/exec, as kubectl exec) and merges the answers: a line per node (its status
and why, the runtime hook, ztunnel's connections, pods enrolled/failed, meshlet's
version), then the mesh pods that failed across nodes, the nodes' problems, and the
meshlet pods that could not be asked (not running, exec refused).

Exit status: 0 when every meshlet pod answered and its node is healthy (ready, or a
ready standby, and no failed mesh pod); 1 otherwise.`,
	flags: func(fs *pflag.FlagSet) runFunc {
		var node, output string
		var all bool
		fs.StringVar(&node, "node", "", "only the meshlet pod(s) on this node")
		fs.StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
		fs.BoolVar(&all, "all", false, "every pod of each node, skipped ones too (table: a line per pod)")
		return runFunc{check: func() error { return checkOutput(output) }, run: func(ctx context.Context, c *cluster, w io.Writer) (int, error) {
			cs, err := clusterStatus(ctx, c, node, all)
			if err != nil {
				return ExitError, err
			}
			if output == "table" {
				printStatus(w, cs, all, time.Now())
			} else if err := printObject(w, output, cs); err != nil {
				return ExitError, err
			}
			if !cs.Healthy {
				return ExitFindings, nil
			}
			return ExitOK, nil
		}}
	},
}

// clusterStatus asks the meshlet pods (those on node, if set) and merges
// their reports.
func clusterStatus(ctx context.Context, c *cluster, node string, all bool) (ClusterStatus, error) {
	m, err := c.findMeshlet(ctx)
	if err != nil {
		return ClusterStatus{}, err
	}
	pods := m.Pods
	if node != "" {
		pods = slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool { return p.Spec.NodeName != node })
		if len(pods) == 0 {
			return ClusterStatus{}, fmt.Errorf("no meshlet pod on node %s", node)
		}
	}
	if len(pods) == 0 {
		return ClusterStatus{}, fmt.Errorf("meshlet's DaemonSet has no pods (no node matches its node selector?)")
	}
	return mergeReports(collectReports(ctx, c.exec, pods), all), nil
}

// detailWidth caps the DETAIL column: the full text is in -o json.
const detailWidth = 40

// printStatus prints the merged status as tables.
func printStatus(w io.Writer, cs ClusterStatus, all bool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tDETAIL\tHOOK\tZTUNNEL\tPODS\tVERSION")
	for _, nr := range cs.Nodes {
		if nr.Report == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\n", orDash(nr.Node), "UNREACHED", short(nr.Error, detailWidth))
			continue
		}
		r := nr.Report
		hook, zt, pods, version := "-", "-", "-", "-"
		if s := r.Summary; s != nil {
			hook = orDash(s.RuntimeHook.Mode)
			if !s.RuntimeHook.Connected {
				hook += " (down)"
			}
			zt = strconv.Itoa(s.Ztunnel.Connections)
			pods = fmt.Sprintf("%d/%d", s.PodCounts["enrolled"], s.PodCounts["failed"])
			version = orDash(s.Version)
		}
		status := r.Status
		if !r.Healthy {
			status += "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(nr.Node), status, short(orDash(r.Detail), detailWidth), hook, zt, pods, version)
	}
	tw.Flush()
	if slices.ContainsFunc(cs.Nodes, func(nr NodeReport) bool { return nr.Report != nil && !nr.Report.Healthy }) {
		fmt.Fprintln(w, "(* not healthy: see PROBLEMS)")
	}
	if all {
		fmt.Fprintln(w, "\nPODS")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tPOD\tSTATE\tSINCE\tZTUNNEL\tREASON")
		for _, nr := range cs.Nodes {
			if nr.Report == nil {
				continue
			}
			for _, p := range nr.Report.Pods {
				fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\t%s\n", nr.Node, p.Namespace, p.Name, p.State, age(p.Since, now),
					orDash(p.Ztunnel), orDash(oneLineText(firstNonEmpty(p.Reason, p.LastError))))
			}
		}
		tw.Flush()
	}
	if len(cs.FailedPods) > 0 {
		fmt.Fprintln(w, "\nFAILED PODS")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tPOD\tSINCE\tRETRIES\tREASON")
		for _, p := range cs.FailedPods {
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%d\t%s\n", p.Node, p.Namespace, p.Name, age(p.Since, now), p.Retries,
				orDash(oneLineText(firstNonEmpty(p.Reason, p.LastError))))
		}
		tw.Flush()
	}
	var problems []string
	for _, nr := range cs.Nodes {
		if nr.Report == nil {
			continue
		}
		for _, p := range nr.Report.Problems {
			problems = append(problems, fmt.Sprintf("%s: %s", nr.Node, oneLineText(p)))
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(w, "\nPROBLEMS")
		for _, p := range problems {
			fmt.Fprintln(w, p)
		}
	}
	if len(cs.Unreached) > 0 {
		fmt.Fprintln(w, "\nNOT ASKED")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tPOD\tWHY")
		for _, nr := range cs.Unreached {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", orDash(nr.Node), nr.Pod, oneLineText(nr.Error))
		}
		tw.Flush()
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }

// short cuts s to n runes, marking the cut.
func short(s string, n int) string {
	s = oneLineText(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// age is how long ago t was, as kubectl prints ages ("-" when unset).
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}
