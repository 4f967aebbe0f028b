// Package debug is meshlet's local debug socket, in the state directory:
// /debug/pods (the node's pods as meshlet sees them) and /debug/settings
// over HTTP, root only, never on a network address; and meshlet status,
// which prints them.
package debug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/internal/httpserve"
	"github.com/meshlet/meshlet/internal/unixsock"
)

// SocketName is the local debug socket in --state-dir: /debug/pods over
// HTTP, mode 0600 (root only), never on a network address.
const SocketName = "debug.sock"

// debugPods is /debug/pods: the node's pods as meshlet sees them.
type debugPods struct {
	Node string `json:"node"`
	// Revision is the Istio revision this meshlet serves (--revision);
	// empty: every revision's pods. RevisionTags are the tags that point
	// to it, as meshlet last read them.
	Revision           string     `json:"revision,omitempty"`
	RevisionTags       []string   `json:"revisionTags,omitempty"`
	Mode               string     `json:"mode"`
	ZtunnelConnections int        `json:"ztunnelConnections"`
	Pods               []debugPod `json:"pods"`
}

type debugPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Sandbox is the runtime's ID of the pod's current sandbox.
	Sandbox    string    `json:"sandbox,omitempty"`
	State      string    `json:"state"`
	Since      time.Time `json:"since"`
	Reason     string    `json:"reason,omitempty"`
	NetnsInode uint64    `json:"netnsInode,omitempty"`
	// Redirection is the in-pod rules' account (backend, families,
	// captures), for an enrolled pod.
	Redirection string `json:"redirection,omitempty"`
	// Ztunnel is "acked" for an enrolled pod while a ztunnel is connected
	// (it acknowledged the pod, or got it in its snapshot), "queued" while
	// none is (the next one gets it), "refused: <ztunnel's reason>" while
	// ztunnel refuses it (meshlet retries; the pod keeps its rules).
	Ztunnel string `json:"ztunnel,omitempty"`
	// Retries counts the failed convergences in a row of a running pod,
	// tried again at RetryAt; LastError is the last failure. An enrolled
	// pod keeps its enrollment meanwhile.
	Retries   int       `json:"retries,omitempty"`
	RetryAt   time.Time `json:"retryAt,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// PodsView is what /debug/pods reads from the core.
type PodsView interface {
	Pods() []enroll.PodStatus
	Record(uid string) (enroll.Record, bool)
}

var _ PodsView = (*enroll.Core)(nil)

// ZtunnelView is what /debug/pods reads from the ZDS server.
type ZtunnelView interface {
	Connections() int
	RefusedPods() map[string]string
}

var _ ZtunnelView = (*zds.Server)(nil)

// Handler serves /debug/pods and /debug/settings: node is the node's
// name, revision the Istio revision served and its tags, mode the pod
// source in use.
func Handler(node string, revision func() (string, []string), mode func() string, core PodsView, zt ZtunnelView, settings func() live.Report) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/settings", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(settings())
	})
	mux.HandleFunc("/debug/pods", func(w http.ResponseWriter, _ *http.Request) {
		out := debugPods{Node: node, Mode: mode(), ZtunnelConnections: zt.Connections(), Pods: []debugPod{}}
		out.Revision, out.RevisionTags = revision()
		refused := zt.RefusedPods()
		for _, p := range core.Pods() {
			d := debugPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Sandbox: p.SandboxID, State: p.State.String(), Since: p.Since,
				Reason: p.Reason, NetnsInode: p.NetnsInode, Retries: p.Retries, RetryAt: p.RetryAt, LastError: p.LastError}
			if r, ok := core.Record(p.UID); ok && p.State == enroll.StateEnrolled {
				d.Redirection = r.Redirection
				switch reason, isRefused := refused[p.UID]; {
				case isRefused:
					d.Ztunnel = "refused: " + reason
				case out.ZtunnelConnections > 0:
					d.Ztunnel = "acked"
				default:
					d.Ztunnel = "queued"
				}
			}
			out.Pods = append(out.Pods, d)
		}
		slices.SortFunc(out.Pods, func(a, b debugPod) int {
			return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.UID, b.Namespace+"/"+b.Name+"/"+b.UID)
		})
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}

// Listen serves h on the debug socket in stateDir.
func Listen(stateDir string, h http.Handler) (*httpserve.Server, error) {
	ln, err := unixsock.ListenStream(filepath.Join(stateDir, SocketName), 0o700, 0o600)
	if err != nil {
		return nil, fmt.Errorf("debug socket: %w", err)
	}
	return httpserve.Serve(ln, h), nil
}

// Status prints the node's pods as the running meshlet sees them (meshlet
// status), from its debug socket in stateDir (--state-dir).
func Status(ctx context.Context, stateDir string, w io.Writer) error {
	path := filepath.Join(stateDir, SocketName)
	var pods debugPods
	if err := getDebug(ctx, path, "/debug/pods", &pods); err != nil {
		return err
	}
	var settings live.Report
	if err := getDebug(ctx, path, "/debug/settings", &settings); err != nil {
		return err
	}
	if err := printStatus(w, pods, time.Now()); err != nil {
		return err
	}
	return printSettings(w, settings)
}

// getDebug reads one of the debug socket's JSON answers into v.
func getDebug(ctx context.Context, socket, endpoint string, v any) error {
	answer, err := httpserve.Get(ctx, socket, endpoint, 5*time.Second, 64<<20)
	if err != nil {
		return fmt.Errorf("ask the running meshlet at %s (is it running, with this --state-dir?): %w", socket, err)
	}
	if !answer.OK {
		return fmt.Errorf("%s %s: %s", socket, endpoint, answer.Status)
	}
	if err := json.Unmarshal(answer.Body, v); err != nil {
		return fmt.Errorf("decode %s: %w", endpoint, err)
	}
	return nil
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

func printStatus(w io.Writer, v debugPods, now time.Time) error {
	revision := ""
	if v.Revision != "" {
		revision = ", revision " + v.Revision
		if len(v.RevisionTags) > 0 {
			revision += " (tags " + strings.Join(v.RevisionTags, ", ") + ")"
		}
	}
	fmt.Fprintf(w, "node %s%s, mode %s, %d ztunnel connection(s), %d pod(s)\n\n", v.Node, revision, v.Mode, v.ZtunnelConnections, len(v.Pods))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATE\tSINCE\tREASON\tSANDBOX\tNETNS\tREDIRECTION\tZTUNNEL\tRETRY")
	for _, p := range v.Pods {
		netns := "-"
		if p.NetnsInode != 0 {
			netns = fmt.Sprint(p.NetnsInode)
		}
		retry := "-"
		if p.Retries > 0 {
			retry = fmt.Sprintf("%d failed, next in %s: %s", p.Retries, age(max(p.RetryAt.Sub(now), 0)), p.LastError)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.State, age(now.Sub(p.Since)),
			dash(p.Reason), dash(shortID(p.Sandbox)), netns, dash(p.Redirection), dash(p.Ztunnel), retry)
	}
	return errors.Join(tw.Flush())
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
