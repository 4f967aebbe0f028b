package debug

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/nodesettings"
	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/nodestatus"
)

// fakePods stands in for the core (its states are tested in agent/enroll).
type fakePods struct{}

func (fakePods) Pods() []enroll.PodStatus {
	since := time.Now().Add(-90 * time.Second)
	return []enroll.PodStatus{
		{UID: "u2", SandboxID: "9e8d7c6b5a4f3210fedcba", Name: "web", Namespace: "shop", State: enroll.StateEnrolled, NetnsInode: 4026532000, Since: since},
		{UID: "u1", Name: "db", Namespace: "legacy", State: enroll.StateSkipped, Reason: "not-selected", Since: since},
		{UID: "u3", Name: "cart", Namespace: "shop", State: enroll.StateEnrolled, NetnsInode: 4026532001, Since: since,
			Retries: 3, RetryAt: time.Now().Add(4 * time.Minute), LastError: "redirect: nftables: apply table inet meshlet: no buffer space"},
	}
}

// fakeZtunnel stands in for the ZDS server: one connection, one pod
// refused.
type fakeZtunnel struct{}

func (fakeZtunnel) Connections() int { return 1 }
func (fakeZtunnel) RefusedPods() map[string]string {
	return map[string]string{"u3": "failed to create inpod proxy"}
}

func (fakePods) Record(uid string) (enroll.Record, bool) {
	if uid == "u2" || uid == "u3" {
		return enroll.Record{UID: uid, Redirection: "nftables/v1 ipv4 inbound-capture"}, true
	}
	return enroll.Record{}, false
}

func TestDebugPodsAndStatus(t *testing.T) {
	settings := live.Report{Effective: nodesettings.Values{DNSCapture: false, IPv6: true, ExcludedNamespaces: []string{"kube-system", "batch"},
		DataplaneModeLabel: "istio.io/dataplane-mode", LogVerbosity: 2, EnrollTimeout: nodesettings.Duration(1500 * time.Millisecond)},
		Sources: []live.SourceReport{{ConfigMap: "meshlet-system/meshlet-settings", State: "invalid", ResourceVersion: "12",
			Error: "settings.yaml: dnsCapture: invalid", Gives: []string{"dnsCapture", "excludedNamespaces"}}}}
	started := time.Now().Add(-3 * time.Hour)
	h := Handler(Sources{Node: "node-a", Revision: func() (string, []string) { return "", nil }, Mode: func() string { return "nri" },
		Core: fakePods{}, Ztunnel: fakeZtunnel{}, Settings: func() live.Report { return settings },
		NetnsPaths: func(inodes []uint64) map[uint64]string { return map[uint64]string{4026532000: "/run/netns/cni-web"} },
		Summary: func() nodestatus.Summary {
			return nodestatus.Summary{Version: "v1.2.3", Started: started, Ready: true, Detail: "serving", Mesh: nodestatus.Mesh{Ready: true},
				RuntimeHook: nodestatus.RuntimeHook{Mode: "nri", Connected: true}, Ztunnel: nodestatus.Ztunnel{Socket: "/run/zt.sock", Connections: 1, RefusedPods: 1},
				API: nodestatus.API{Enabled: true, Synced: true}, DRA: &nodestatus.DRA{Driver: "mesh.meshlet.dev", DeviceReady: true, PreparedClaims: 2},
				NodeReadiness: &nodestatus.NodeReadiness{Taint: "mesh.meshlet.dev/not-ready", Published: true, Ready: true}}
		}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pods", nil))
	var v debugPods
	v.Pods = nil
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Node != "node-a" || v.Mode != "nri" || len(v.Pods) != 3 || v.Pods[0].Name != "db" || v.Pods[2].Ztunnel != "acked" ||
		v.Pods[2].Redirection != "nftables/v1 ipv4 inbound-capture" || v.Pods[0].Ztunnel != "" || v.Pods[2].Sandbox != "9e8d7c6b5a4f3210fedcba" {
		t.Fatalf("/debug/pods = %+v", v)
	}
	if cart := v.Pods[1]; cart.Name != "cart" || cart.Ztunnel != "refused: failed to create inpod proxy" || cart.Retries != 3 || !strings.Contains(cart.LastError, "no buffer space") {
		t.Fatalf("/debug/pods: the refused, retried pod = %+v", cart)
	}

	// meshlet status reads it from the debug socket in --state-dir.
	stateDir := t.TempDir()
	srv, err := Listen(stateDir, h)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if fi, err := os.Stat(filepath.Join(stateDir, SocketName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("debug socket: %v, mode %v; want 0600", err, fi.Mode())
	}
	var out bytes.Buffer
	if err := Status(context.Background(), StatusOptions{StateDir: stateDir, All: true}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"meshlet:", "READY", "serving", "Node:", "node-a", "v1.2.3, started 3h ago", "NRI, connected", "1 connection(s) on /run/zt.sock, 1 pod(s) refused",
		"API server:", "synced", "Mesh device:", "ready (driver mesh.meshlet.dev, 2 prepared claim(s))", "Node taint:", "mesh.meshlet.dev/not-ready off (ready)",
		"configmap meshlet-system/meshlet-settings invalid", "2 enrolled, 1 skipped",
		"NAMESPACE", "SANDBOX", "shop", "web", "enrolled", "1m", "9e8d7c6b5a4f3 ", "/run/netns/cni-web", "net:[4026532001]", "acked", "not-selected",
		"refused: failed to create inpod proxy", "3 failed, next in 3m: redirect: nftables",
		"settings: dnsCapture=false ipv6=true excludedNamespaces=kube-system,batch", "enrollTimeout=1.5s logVerbosity=2",
		"configmap meshlet-system/meshlet-settings: invalid (resourceVersion 12), gives dnsCapture,excludedNamespaces", "settings.yaml: dnsCapture: invalid"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("meshlet status lacks %q:\n%s", want, out.String())
		}
	}

	// No meshlet running: the error says where it looked.
	stateDir = t.TempDir()
	out.Reset()
	if err := Status(context.Background(), StatusOptions{StateDir: stateDir}, &out); !errors.Is(err, ErrNotHealthy) || !strings.Contains(out.String(), "NOT READY") || !strings.Contains(out.String(), stateDir) {
		t.Fatalf("status without a meshlet = %v:\n%s\nwant ErrNotHealthy and NOT READY naming %s", err, out.String(), stateDir)
	}
}

// TestPodStatesNameEveryState: meshlet status's --state and its order
// know every state the core has.
func TestPodStatesNameEveryState(t *testing.T) {
	for s := enroll.StateUnknown; s <= enroll.StateFailed; s++ {
		if !slices.Contains(nodestatus.PodStates, s.String()) {
			t.Errorf("PodStates lacks %q", s)
		}
	}
}

// TestProfiles: the runtime's profiles, as go tool pprof reads them
// (gzipped) and as text; a bad debug level is refused.
func TestProfiles(t *testing.T) {
	h := Handler(Sources{})
	get := func(url string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", url, nil))
		return rec
	}
	for _, name := range []string{"heap", "allocs", "goroutine"} {
		rec := get("/debug/pprof/" + name + "?gc=1")
		if b := rec.Body.Bytes(); rec.Code != 200 || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %d, want a gzipped profile (%.20q)", name, rec.Code, b)
		}
	}
	if rec := get("/debug/pprof/goroutine?debug=2"); rec.Code != 200 || !strings.Contains(rec.Body.String(), "TestProfiles") {
		t.Errorf("goroutine?debug=2: %d, want every stack, this test's among them:\n%.300s", rec.Code, rec.Body.String())
	}
	if rec := get("/debug/pprof/heap?debug=7"); rec.Code != 400 || !strings.Contains(rec.Body.String(), "debug=") {
		t.Errorf("heap?debug=7: %d %q, want 400 naming debug", rec.Code, rec.Body.String())
	}
}
