// Package debug is meshlet's local debug socket, in the state directory:
// /debug/status (the node's state), /debug/pods (the node's pods as
// meshlet sees them) and /debug/settings over HTTP, root only, never on a
// network address; and meshlet status, which prints them.
package debug

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/nodestatus"
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
	Revision           string           `json:"revision,omitempty"`
	RevisionTags       []string         `json:"revisionTags,omitempty"`
	Mode               string           `json:"mode"`
	ZtunnelConnections int              `json:"ztunnelConnections"`
	Pods               []nodestatus.Pod `json:"pods"`
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

// Sources are what the debug socket reports.
type Sources struct {
	// Node is the node's name.
	Node string
	// Revision is the Istio revision served and its tags.
	Revision func() (string, []string)
	// Mode is the pod source in use.
	Mode    func() string
	Core    PodsView
	Ztunnel ZtunnelView
	// Settings are the node settings and their ConfigMaps.
	Settings func() live.Report
	// Summary is the node's state (/debug/status) but for what the
	// handler fills in from the other sources: the node, the revision
	// and the pod counts.
	Summary func() nodestatus.Summary
	// Failures are the recent failed enrollments in runtime hooks (nil:
	// none recorded).
	Failures *Failures
	// NetnsPaths finds, for network namespace inodes, a path to each
	// (nil: none is looked for).
	NetnsPaths func(inodes []uint64) map[uint64]string
}

// Handler serves /debug/pods, /debug/status, /debug/settings and the
// runtime's profiles (/debug/pprof/heap, allocs, goroutine).
func Handler(src Sources) http.Handler {
	mux := http.NewServeMux()
	for _, name := range profiles {
		mux.HandleFunc("/debug/pprof/"+name, serveProfile(name))
	}
	mux.HandleFunc("/debug/settings", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, src.Settings())
	})
	mux.HandleFunc("/debug/pods", func(w http.ResponseWriter, _ *http.Request) {
		out := debugPods{Node: src.Node, Mode: src.Mode(), ZtunnelConnections: src.Ztunnel.Connections(), Pods: src.pods()}
		out.Revision, out.RevisionTags = src.Revision()
		writeJSON(w, out)
	})
	mux.HandleFunc("/debug/status", func(w http.ResponseWriter, _ *http.Request) {
		s := src.Summary()
		s.Node = src.Node
		s.Revision, s.RevisionTags = src.Revision()
		if src.Failures != nil {
			s.RecentFailures = src.Failures.Recent()
		}
		s.PodCounts = map[string]int{}
		for _, p := range src.Core.Pods() {
			s.PodCounts[p.State.String()]++
		}
		writeJSON(w, s)
	})
	return mux
}

// pods are the node's pods, sorted by namespace, name and UID.
func (src Sources) pods() []nodestatus.Pod {
	connections := src.Ztunnel.Connections()
	refused := src.Ztunnel.RefusedPods()
	out := []nodestatus.Pod{}
	var inodes []uint64
	for _, p := range src.Core.Pods() {
		d := nodestatus.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Sandbox: p.SandboxID, State: p.State.String(), Since: p.Since,
			Reason: p.Reason, NetnsInode: p.NetnsInode, Retries: p.Retries, RetryAt: p.RetryAt, LastError: p.LastError}
		if r, ok := src.Core.Record(p.UID); ok && p.State == enroll.StateEnrolled {
			d.Redirection = r.Redirection
			switch reason, isRefused := refused[p.UID]; {
			case isRefused:
				d.Ztunnel = "refused: " + reason
			case connections > 0:
				d.Ztunnel = "acked"
			default:
				d.Ztunnel = "queued"
			}
		}
		if p.NetnsInode != 0 {
			inodes = append(inodes, p.NetnsInode)
		}
		out = append(out, d)
	}
	if src.NetnsPaths != nil && len(inodes) > 0 {
		paths := src.NetnsPaths(inodes)
		for i := range out {
			out[i].Netns = paths[out[i].NetnsInode]
		}
	}
	slices.SortFunc(out, func(a, b nodestatus.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.UID, b.Namespace+"/"+b.Name+"/"+b.UID)
	})
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Listen serves h on the debug socket in stateDir.
func Listen(stateDir string, h http.Handler) (*httpserve.Server, error) {
	ln, err := unixsock.ListenStream(filepath.Join(stateDir, SocketName), 0o700, 0o600)
	if err != nil {
		return nil, fmt.Errorf("debug socket: %w", err)
	}
	return httpserve.Serve(ln, h), nil
}
