package debug

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/nodestatus"
)

// printBrief writes one line: the status, and why it is not OK.
func printBrief(w io.Writer, r nodestatus.Report) error {
	line := r.Status
	if r.Healthy {
		line += ": " + r.Detail
	} else if len(r.Problems) > 0 {
		line += ": " + strings.Join(r.Problems, "; ")
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// printReport writes the summary, the pods and the settings, as a table.
func printReport(w io.Writer, r nodestatus.Report, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, a...)...) }
	row("meshlet", "%s\t%s", r.Status, r.Detail)
	if s := r.Summary; s != nil {
		row("Node", "%s", s.Node)
		version := s.Version
		if s.Revision != "" {
			version += ", revision " + s.Revision
			if len(s.RevisionTags) > 0 {
				version += " (tags " + strings.Join(s.RevisionTags, ", ") + ")"
			}
		}
		row("Version", "%s, started %s ago", version, age(now.Sub(s.Started)))
		row("Runtime hook", "%s", runtimeHook(s.RuntimeHook))
		row("Ztunnel", "%d connection(s) on %s%s", s.Ztunnel.Connections, s.Ztunnel.Socket, plural(s.Ztunnel.RefusedPods, ", %d pod(s) refused"))
		row("API server", "%s", apiServer(s.API))
		if s.DRA != nil {
			row("Mesh device", "%s", meshDevice(*s.DRA))
		}
		if s.NodeReadiness != nil {
			row("Node "+nodeReadinessKind(*s.NodeReadiness), "%s", nodeReadiness(*s.NodeReadiness))
		}
		if r.Settings != nil {
			row("Settings", "%s", settingsSource(*r.Settings))
		}
		row("Pods", "%s", podCounts(s.PodCounts))
	}
	for i, p := range r.Problems {
		k := ""
		if i == 0 {
			k = "Problems"
		}
		fmt.Fprintf(tw, "%s\t%s\n", k+":", p)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Summary == nil && r.Settings == nil {
		return nil // nothing was read from a meshlet
	}
	fmt.Fprintln(w)
	if err := printPods(w, r.Pods, now); err != nil {
		return err
	}
	if r.Settings != nil {
		return printSettings(w, *r.Settings)
	}
	return nil
}

func plural(n int, format string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(format, n)
}

func runtimeHook(h nodestatus.RuntimeHook) string {
	name := map[string]string{"nri": "NRI", "cni": "CNI (meshlet-cni chained)"}[h.Mode]
	if name == "" {
		name = h.Mode
	}
	if h.Connected {
		return name + ", connected"
	}
	return name + ", not connected: " + h.Detail
}

func apiServer(a nodestatus.API) string {
	switch {
	case !a.Enabled:
		return "none (--standalone)"
	case a.Synced:
		return "synced"
	}
	return "not synced: " + a.Error
}

func meshDevice(d nodestatus.DRA) string {
	state := "ready"
	if !d.DeviceReady {
		state = "tainted " + d.Taint
	}
	return fmt.Sprintf("%s (driver %s, %d prepared claim(s))", state, d.Driver, d.PreparedClaims)
}

func nodeReadinessKind(n nodestatus.NodeReadiness) string {
	if n.Taint != "" {
		return "taint"
	}
	return "condition"
}

func nodeReadiness(n nodestatus.NodeReadiness) string {
	name := n.Taint + n.Condition
	var s string
	switch {
	case !n.Published:
		s = name + " not written yet"
	case n.Taint != "" && n.Ready:
		s = name + " off (ready)"
	case n.Taint != "":
		s = name + "=" + n.Reason + ":NoSchedule"
	case n.Ready:
		s = name + "=True"
	default:
		s = name + "=False (" + n.Reason + ")"
	}
	if n.Error != "" {
		s += "; last write failed: " + n.Error
	}
	return s
}

// settingsSource says where the node settings come from.
func settingsSource(v live.Report) string {
	if len(v.Sources) == 0 {
		return "flags only"
	}
	parts := make([]string, 0, len(v.Sources))
	for _, s := range v.Sources {
		parts = append(parts, "configmap "+s.ConfigMap+" "+s.State)
	}
	return strings.Join(parts, "; ")
}

func podCounts(counts map[string]int) string {
	var parts []string
	for _, state := range nodestatus.PodStates {
		if n := counts[state]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, state))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func printPods(w io.Writer, pods []nodestatus.Pod, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATE\tSINCE\tREASON\tSANDBOX\tNETNS\tREDIRECTION\tZTUNNEL\tRETRY")
	for _, p := range pods {
		netns := p.Netns
		if netns == "" && p.NetnsInode != 0 {
			netns = fmt.Sprintf("net:[%d]", p.NetnsInode)
		}
		retry := "-"
		if p.Retries > 0 {
			retry = fmt.Sprintf("%d failed, next in %s: %s", p.Retries, age(max(p.RetryAt.Sub(now), 0)), p.LastError)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.State, age(now.Sub(p.Since)),
			dash(p.Reason), dash(shortID(p.Sandbox)), dash(netns), dash(p.Redirection), dash(p.Ztunnel), retry)
	}
	return errors.Join(tw.Flush())
}

// printSettings writes the effective node settings, then where each
// ConfigMap stands.
func printSettings(w io.Writer, v live.Report) error {
	e := v.Effective
	fmt.Fprintf(w, "\nsettings: dnsCapture=%t ipv6=%t excludedNamespaces=%s deniedRuntimeHandlers=%s dataplaneModeLabel=%s enrollTimeout=%v logVerbosity=%d\n",
		e.DNSCapture, e.IPv6, strings.Join(e.ExcludedNamespaces, ","), strings.Join(e.DeniedRuntimeHandlers, ","), e.DataplaneModeLabel, e.EnrollTimeout, e.LogVerbosity)
	if e.EnablementSelectors != nil {
		fmt.Fprintf(w, "enablement selectors (in place of the dataplane-mode label): %d\n", len(e.EnablementSelectors))
		for _, s := range e.EnablementSelectors {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	for _, s := range v.Sources {
		fmt.Fprintf(w, "configmap %s: %s", s.ConfigMap, s.State)
		if s.ResourceVersion != "" {
			fmt.Fprintf(w, " (resourceVersion %s)", s.ResourceVersion)
		}
		if len(s.Gives) > 0 {
			fmt.Fprintf(w, ", gives %s", strings.Join(s.Gives, ","))
		}
		if s.Error != "" {
			fmt.Fprintf(w, "\n  %s", s.Error)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// shortID is a runtime ID as crictl shows it: its first 13 characters.
func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age is a duration as kubectl shows ages: 5s, 3m, 2h, 4d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
