package kubectlmeshlet

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/meshlet/meshlet/internal/version"
)

var versionCommand = command{
	name:    "version",
	summary: "this plugin's version, the chart's, and the image each node runs",
	help: `version prints this plugin's version; for each meshlet DaemonSet, the chart that installed it
(its helm.sh/chart and app.kubernetes.io/version labels) and the image its template
names; and for each node, the image its meshlet pod runs and the image's ID (digest) as
the runtime resolved it. A node whose pod runs another image than the template is
marked: the DaemonSet is being updated there (or cannot be).

Exit status: 0 once printed (mid-update nodes too).`,
	flags: func(fs *pflag.FlagSet) runFunc {
		var output string
		fs.StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
		return runFunc{check: func() error { return checkOutput(output) }, run: func(ctx context.Context, c *cluster, w io.Writer) (int, error) {
			v, err := versions(ctx, c)
			if err != nil {
				return ExitError, err
			}
			if output == "table" {
				printVersions(w, v)
			} else if err := printObject(w, output, v); err != nil {
				return ExitError, err
			}
			return ExitOK, nil
		}}
	},
}

// Versions is kubectl meshlet version's result.
type Versions struct {
	Client     string             `json:"client"`
	DaemonSets []DaemonSetVersion `json:"daemonSets"`
	Nodes      []NodeVersion      `json:"nodes"`
}

// DaemonSetVersion is what a meshlet DaemonSet was installed from.
type DaemonSetVersion struct {
	DaemonSet string `json:"daemonSet"`
	// Chart is the helm.sh/chart label (NAME-VERSION), AppVersion the
	// app.kubernetes.io/version label ("" when not installed by the chart).
	Chart      string `json:"chart,omitempty"`
	AppVersion string `json:"appVersion,omitempty"`
	// Image is the template's meshlet image: what its pods are to run.
	Image string `json:"image"`
}

// NodeVersion is the image a node's meshlet pod runs.
type NodeVersion struct {
	Node string `json:"node"`
	Pod  string `json:"pod"`
	// Image is the pod's meshlet image, ImageID the runtime's resolved
	// one (a digest; "" until the container started).
	Image   string `json:"image"`
	ImageID string `json:"imageID,omitempty"`
	// Outdated: Image is not the DaemonSet template's (an update is
	// under way on the node, or stuck).
	Outdated bool `json:"outdated,omitempty"`
}

func versions(ctx context.Context, c *cluster) (Versions, error) {
	v := Versions{Client: version.String(), DaemonSets: []DaemonSetVersion{}, Nodes: []NodeVersion{}}
	m, err := c.findMeshlet(ctx)
	if err != nil {
		return v, err
	}
	return mergeVersions(v, m), nil
}

// mergeVersions adds m's DaemonSets and pods to v.
func mergeVersions(v Versions, m *meshlet) Versions {
	for i := range m.DaemonSets {
		ds := &m.DaemonSets[i]
		dv := DaemonSetVersion{DaemonSet: ds.Namespace + "/" + ds.Name, Chart: ds.Labels["helm.sh/chart"], AppVersion: ds.Labels["app.kubernetes.io/version"]}
		if c := meshletContainer(&ds.Spec.Template.Spec); c != nil {
			dv.Image = c.Image
		}
		v.DaemonSets = append(v.DaemonSets, dv)
	}
	for i := range m.Pods {
		p := &m.Pods[i]
		nv := NodeVersion{Node: p.Spec.NodeName, Pod: p.Namespace + "/" + p.Name}
		if c := meshletContainer(&p.Spec); c != nil {
			nv.Image = c.Image
			if cs := containerStatus(p, c.Name); cs != nil {
				nv.ImageID = cs.ImageID
			}
		}
		if ds := m.daemonSetOf(p); ds != nil {
			if c := meshletContainer(&ds.Spec.Template.Spec); c != nil {
				nv.Outdated = c.Image != nv.Image
			}
		}
		v.Nodes = append(v.Nodes, nv)
	}
	return v
}

func printVersions(w io.Writer, v Versions) {
	fmt.Fprintf(w, "kubectl-meshlet %s\n\n", v.Client)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "DAEMONSET\tCHART\tAPP VERSION\tIMAGE")
	for _, d := range v.DaemonSets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.DaemonSet, orDash(d.Chart), orDash(d.AppVersion), d.Image)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPOD\tIMAGE\tIMAGE ID")
	outdated := 0
	for _, n := range v.Nodes {
		image := n.Image
		if n.Outdated {
			image += " (not the DaemonSet's)"
			outdated++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", orDash(n.Node), n.Pod, image, orDash(n.ImageID))
	}
	tw.Flush()
	if outdated > 0 {
		fmt.Fprintf(w, "\n%d meshlet pod(s) run another image than their DaemonSet's template: an update is under way (or stuck) there.\n", outdated)
	}
}
