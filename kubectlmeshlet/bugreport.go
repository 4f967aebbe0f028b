package kubectlmeshlet

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var bugReportCommand = command{
	name:    "bug-report",
	summary: "gathers what a bug report needs into a .tar.gz (never a Secret)",
	help: `bug-report writes a .tar.gz with, under one directory:
  status/NODE_POD.json        each node's 'meshlet status -o json --all' (or why it has none)
  logs/NAMESPACE_POD_CONTAINER[.previous].log
                              each meshlet pod's containers' logs, current and previous (--tail lines)
  daemonsets/NAMESPACE_NAME.yaml
                              meshlet's DaemonSets
  configmaps/NAMESPACE_NAME.yaml
                              the node settings' ConfigMaps (the DaemonSet's --config-map)
  events/NAMESPACE.yaml       the events in meshlet's namespace
  events/mesh.yaml            the mesh's events in every namespace (meshlet's, Mesh* reasons)
  nodes.yaml                  each node's runtime, kubelet version, taints and conditions
  version.txt, precheck.txt   kubectl meshlet version and precheck
  errors.txt                  what could not be gathered, if anything
It reads no Secret. The path is printed.

Exit status: 0 once the archive is written (errors.txt lists what is missing from it).`,
	flags: func(fs *pflag.FlagSet) runFunc {
		var file string
		var tail int64
		fs.StringVarP(&file, "file", "f", "", "the archive to write (default: meshlet-bug-report-TIME.tar.gz here)")
		fs.Int64Var(&tail, "tail", 10000, "lines of each container's log, from its end")
		return runFunc{run: func(ctx context.Context, c *cluster, w io.Writer) (int, error) {
			now := time.Now().UTC()
			if file == "" {
				file = "meshlet-bug-report-" + now.Format("20060102-150405") + ".tar.gz"
			}
			files, err := gatherBugReport(ctx, c, tail)
			if err != nil {
				return ExitError, err
			}
			top := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(file), ".gz"), ".tar")
			if err := writeTarball(file, top, files, now); err != nil {
				return ExitError, err
			}
			fmt.Fprintln(w, file)
			return ExitOK, nil
		}}
	},
}

// reportFile is a file of the bug report.
type reportFile struct {
	name string
	data []byte
}

// reportFiles collects the files; a piece that cannot be read goes to
// errors.txt instead of failing the whole report.
type reportFiles struct {
	files []reportFile
	errs  []string
}

func (r *reportFiles) add(name string, data []byte) {
	r.files = append(r.files, reportFile{name, data})
}

func (r *reportFiles) addYAML(name string, v any) {
	b, err := yaml.Marshal(v)
	if err != nil {
		r.fail(name, err)
		return
	}
	r.add(name, b)
}

func (r *reportFiles) fail(what string, err error) {
	r.errs = append(r.errs, fmt.Sprintf("%s: %s", what, oneLine(err)))
}

// gatherBugReport reads everything the report holds.
func gatherBugReport(ctx context.Context, c *cluster, tail int64) ([]reportFile, error) {
	var r reportFiles
	m, err := c.findMeshlet(ctx)
	if err != nil && !errors.Is(err, errNoMeshlet) {
		return nil, err
	}
	if err != nil {
		r.fail("meshlet", err)
		m = &meshlet{}
	}

	for _, nr := range collectReports(ctx, c.exec, m.Pods) {
		base := "status/" + safeName(orDash(nr.Node)+"_"+strings.ReplaceAll(nr.Pod, "/", "_"))
		if nr.Raw != nil {
			r.add(base+".json", nr.Raw)
		}
		if nr.Error != "" {
			r.add(base+".error.txt", []byte(nr.Error+"\n"))
		}
	}
	for i := range m.Pods {
		podLogs(ctx, c, &m.Pods[i], tail, &r)
	}
	namespaces := []string{}
	for i := range m.DaemonSets {
		ds := m.DaemonSets[i].DeepCopy()
		ds.ManagedFields = nil
		ds.APIVersion, ds.Kind = "apps/v1", "DaemonSet"
		r.addYAML("daemonsets/"+safeName(ds.Namespace+"_"+ds.Name)+".yaml", ds)
		if !slices.Contains(namespaces, ds.Namespace) {
			namespaces = append(namespaces, ds.Namespace)
		}
		for _, ref := range settingsConfigMaps(ds) {
			ns, name, ok := strings.Cut(ref, "/")
			if !ok {
				ns, name = ds.Namespace, ref
			}
			cm, err := c.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				r.fail("ConfigMap "+ns+"/"+name, err)
				continue
			}
			cm.ManagedFields = nil
			cm.APIVersion, cm.Kind = "v1", "ConfigMap"
			r.addYAML("configmaps/"+safeName(ns+"_"+name)+".yaml", cm)
		}
	}
	if c.namespace != "" && !slices.Contains(namespaces, c.namespace) {
		namespaces = append(namespaces, c.namespace)
	}
	for _, ns := range namespaces {
		events, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			r.fail("events in "+ns, err)
			continue
		}
		r.addYAML("events/"+safeName(ns)+".yaml", eventsOut(events.Items))
	}
	if events, err := c.client.CoreV1().Events("").List(ctx, metav1.ListOptions{}); err != nil {
		r.fail("events", err)
	} else {
		r.addYAML("events/mesh.yaml", eventsOut(slices.DeleteFunc(events.Items, func(e corev1.Event) bool { return !meshEvent(&e) })))
	}
	if nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		r.fail("nodes", err)
	} else {
		var out []nodeSummary
		for _, n := range nodes.Items {
			out = append(out, summarizeNode(&n))
		}
		r.addYAML("nodes.yaml", out)
	}

	var buf bytes.Buffer
	if v, err := versions(ctx, c); err != nil {
		r.fail("version", err)
	} else {
		printVersions(&buf, v)
		r.add("version.txt", slices.Clone(buf.Bytes()))
	}
	if in, err := gatherPrecheck(ctx, c); err != nil {
		r.fail("precheck", err)
	} else {
		buf.Reset()
		printChecks(&buf, precheckRules(in))
		r.add("precheck.txt", slices.Clone(buf.Bytes()))
	}
	if len(r.errs) > 0 {
		r.add("errors.txt", []byte(strings.Join(r.errs, "\n")+"\n"))
	}
	return r.files, nil
}

// podLogs adds the logs of each of p's containers, init containers
// included, and of their previous instance where one exited.
func podLogs(ctx context.Context, c *cluster, p *corev1.Pod, tail int64, r *reportFiles) {
	statuses := slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
	for _, cont := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		i := slices.IndexFunc(statuses, func(s corev1.ContainerStatus) bool { return s.Name == cont.Name })
		if i < 0 {
			continue // never started: no log
		}
		base := "logs/" + safeName(p.Namespace+"_"+p.Name+"_"+cont.Name)
		previous := statuses[i].LastTerminationState.Terminated != nil
		for _, prev := range []bool{false, true} {
			if prev && !previous {
				continue
			}
			name := base + ".log"
			if prev {
				name = base + ".previous.log"
			}
			b, err := c.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cont.Name, Previous: prev, TailLines: &tail}).DoRaw(ctx)
			if err != nil {
				r.fail(name, err)
				continue
			}
			r.add(name, b)
		}
	}
}

// settingsConfigMaps are the ConfigMaps of node settings a DaemonSet's
// meshlet reads: its MESHLET_CONFIG_MAP (the chart's) and --config-map
// arguments, NAMESPACE/NAME each.
func settingsConfigMaps(ds *appsv1.DaemonSet) []string {
	c := meshletContainer(&ds.Spec.Template.Spec)
	if c == nil {
		return nil
	}
	var refs []string
	addList := func(v string) {
		for ref := range strings.SplitSeq(v, ",") {
			if ref = strings.TrimSpace(ref); ref != "" && !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
		}
	}
	for _, e := range c.Env {
		if e.Name == "MESHLET_CONFIG_MAP" {
			addList(e.Value)
		}
	}
	args := slices.Concat(c.Command, c.Args)
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--config-map=") || strings.HasPrefix(a, "-config-map="):
			_, v, _ := strings.Cut(a, "=")
			addList(v)
		case (a == "--config-map" || a == "-config-map") && i+1 < len(args):
			addList(args[i+1])
		}
	}
	return refs
}

// meshEventReasons are the reasons of the events meshlet records
// (agent/kube/events.go): on pods, Mesh*; on ConfigMaps of node settings,
// InvalidNodeSettings.
var meshEventReasons = []string{"InvalidNodeSettings"}

func meshEvent(e *corev1.Event) bool {
	return strings.HasPrefix(e.Reason, "Mesh") || slices.Contains(meshEventReasons, e.Reason) ||
		e.Source.Component == "meshlet" || e.ReportingController == "meshlet"
}

// eventOut is an event as the report keeps it.
type eventOut struct {
	Namespace string      `json:"namespace"`
	Object    string      `json:"object"`
	Type      string      `json:"type"`
	Reason    string      `json:"reason"`
	Message   string      `json:"message"`
	Source    string      `json:"source,omitempty"`
	Count     int32       `json:"count,omitempty"`
	First     metav1.Time `json:"first,omitzero"`
	Last      metav1.Time `json:"last,omitzero"`
}

func eventsOut(events []corev1.Event) []eventOut {
	out := []eventOut{}
	for _, e := range events {
		last := e.LastTimestamp
		if last.IsZero() {
			last = metav1.NewTime(e.EventTime.Time)
		}
		out = append(out, eventOut{Namespace: e.Namespace, Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name, Type: e.Type,
			Reason: e.Reason, Message: e.Message, Source: strings.TrimSpace(e.Source.Component + " " + e.Source.Host),
			Count: e.Count, First: e.FirstTimestamp, Last: last})
	}
	slices.SortStableFunc(out, func(a, b eventOut) int { return a.Last.Compare(b.Last.Time) })
	return out
}

// nodeSummary is a node as the report keeps it.
type nodeSummary struct {
	Name           string                 `json:"name"`
	Runtime        string                 `json:"runtime"`
	KubeletVersion string                 `json:"kubeletVersion"`
	KernelVersion  string                 `json:"kernelVersion,omitempty"`
	OSImage        string                 `json:"osImage,omitempty"`
	Labels         map[string]string      `json:"labels,omitempty"`
	Taints         []corev1.Taint         `json:"taints,omitempty"`
	Conditions     []corev1.NodeCondition `json:"conditions,omitempty"`
}

func summarizeNode(n *corev1.Node) nodeSummary {
	info := n.Status.NodeInfo
	return nodeSummary{Name: n.Name, Runtime: info.ContainerRuntimeVersion, KubeletVersion: info.KubeletVersion,
		KernelVersion: info.KernelVersion, OSImage: info.OSImage, Labels: n.Labels, Taints: n.Spec.Taints, Conditions: n.Status.Conditions}
}

// safeName keeps a file name to letters, digits and ._-.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, s)
}

// writeTarball writes files under top/ into a .tar.gz at path, through a
// temporary file renamed in place (no half-written archive).
func writeTarball(path, top string, files []reportFile, mtime time.Time) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".meshlet-bug-report-*")
	if err != nil {
		return fmt.Errorf("bug report: %w", err)
	}
	defer os.Remove(tmp.Name())
	gz := gzip.NewWriter(tmp)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		hdr := &tar.Header{Name: top + "/" + f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("bug report %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("bug report %s: %w", f.name, err)
		}
	}
	for _, closer := range []io.Closer{tw, gz} {
		if err := closer.Close(); err != nil {
			return fmt.Errorf("bug report: %w", err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("bug report: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("bug report: %w", err)
	}
	return nil
}

// ReadBugReport reads back a report bug-report wrote: each file's content
// by its path in the archive (top directory included).
func ReadBugReport(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, hdr.Name, err)
		}
		files[hdr.Name] = string(b)
	}
}
