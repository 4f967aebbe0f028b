package cri_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/cri"
)

// fakeRuntime serves the three CRI calls the Lister makes, from a fixed
// set of sandboxes. It ignores ListPodSandbox's filter (after checking it
// asks for ready sandboxes), so the Lister's own check is exercised too.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	t         *testing.T
	listErr   error
	sandboxes []*runtimeapi.PodSandbox
	statuses  map[string]*runtimeapi.PodSandboxStatusResponse
	errs      map[string]error // PodSandboxStatus errors by ID

	mu      sync.Mutex
	verbose []bool
}

func (f *fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "v9.9.9", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	if r.GetFilter().GetState().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || r.GetFilter().GetState() == nil {
		f.t.Errorf("ListPodSandbox filter = %v; want ready sandboxes", r.GetFilter())
	}
	if f.listErr != nil {
		return nil, f.listErr
	}
	return &runtimeapi.ListPodSandboxResponse{Items: f.sandboxes}, nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	f.verbose = append(f.verbose, r.GetVerbose())
	f.mu.Unlock()
	if err := f.errs[r.GetPodSandboxId()]; err != nil {
		return nil, err
	}
	return f.statuses[r.GetPodSandboxId()], nil
}

// shortDir is a temporary directory with a path short enough for a Unix
// socket (t.TempDir's can pass 104 bytes on macOS).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func serve(t *testing.T, f *fakeRuntime) string {
	t.Helper()
	f.t = t
	sock := filepath.Join(shortDir(t), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s, f)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return sock
}

func testCtx(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// info is a containerd-shaped verbose info naming netns as the sandbox's
// network namespace.
func info(netns string) map[string]string {
	return map[string]string{"info": `{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"` + netns + `"}]}}}`}
}

func sandbox(id, uid string, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{Id: id, State: state,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + id, Namespace: "ns", Uid: uid}}
}

func statusResp(id, uid, ip string, state runtimeapi.PodSandboxState, info map[string]string) *runtimeapi.PodSandboxStatusResponse {
	return &runtimeapi.PodSandboxStatusResponse{
		Status: &runtimeapi.PodSandboxStatus{Id: id, State: state,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + id, Namespace: "ns", Uid: uid},
			Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: ip}},
		Info: info,
	}
}

func TestDial(t *testing.T) {
	ctx := testCtx(t)
	sock := serve(t, &fakeRuntime{})
	for _, ep := range []string{sock, "unix://" + sock} {
		l, err := cri.Dial(ctx, ep)
		if err != nil {
			t.Fatalf("Dial(%q): %v", ep, err)
		}
		if name, version := l.Runtime(); name != "fake" || version != "v9.9.9" {
			t.Errorf("Runtime() = %q, %q", name, version)
		}
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}

	missing := filepath.Join(shortDir(t), "none.sock")
	start := time.Now()
	if _, err := cri.Dial(ctx, missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Dial(missing socket) = %v; want an error naming %s", err, missing)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Dial(missing socket) took %v; a refused connection must fail at once", d)
	}
	for _, ep := range []string{"", "unix://", "tcp://127.0.0.1:1234", "npipe:////./pipe/containerd"} {
		if _, err := cri.Dial(ctx, ep); err == nil {
			t.Errorf("Dial(%q) succeeded", ep)
		}
	}
}

// A socket that accepts but never answers: Dial ends with ctx.
func TestDialBoundedByContext(t *testing.T) {
	sock := filepath.Join(shortDir(t), "mute.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = cri.Dial(ctx, sock)
	if err == nil || !strings.Contains(err.Error(), sock) {
		t.Errorf("Dial(mute socket) = %v; want an error naming %s", err, sock)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Dial(mute socket) took %v with a 300ms context", d)
	}
}

func TestFind(t *testing.T) {
	ctx := testCtx(t)
	sock := serve(t, &fakeRuntime{})
	dir := shortDir(t)
	a, b := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	if got, err := cri.Find(ctx, []string{a, sock, b}); err != nil || got != sock {
		t.Errorf("Find = %q, %v; want %q", got, err, sock)
	}
	got, err := cri.Find(ctx, []string{a, b})
	if err == nil || got != "" || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Errorf("Find(none answers) = %q, %v; want an error naming %s and %s", got, err, a, b)
	}
	if _, err := cri.Find(ctx, nil); err == nil {
		t.Error("Find(no candidates) succeeded")
	}
	if len(cri.DefaultEndpoints) != 2 || cri.DefaultEndpoints[0] != "/run/containerd/containerd.sock" {
		t.Errorf("DefaultEndpoints = %q", cri.DefaultEndpoints)
	}
}

func TestRunningPods(t *testing.T) {
	ready, notReady := runtimeapi.PodSandboxState_SANDBOX_READY, runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	f := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{
			sandbox("ok", "uid-ok", ready),
			sandbox("badip", "uid-badip", ready),
			sandbox("stopped", "uid-stopped", notReady), // the runtime's filter let it through
			sandbox("gone", "uid-gone", ready),          // removed before its status
			sandbox("stopping", "uid-stopping", ready),  // stopped before its status
			sandbox("nonetns", "uid-nonetns", ready),    // cannot be enrolled
			sandbox("nonetns2", "uid-nonetns2", ready),  // nor this one
			sandbox("ok2", "uid-ok2", ready),
		},
		statuses: map[string]*runtimeapi.PodSandboxStatusResponse{
			"ok":       statusResp("ok", "uid-ok", "203.0.113.5", ready, info("/run/netns/ok")),
			"badip":    statusResp("badip", "uid-badip", "bogus", ready, info("/run/netns/badip")),
			"stopped":  statusResp("stopped", "uid-stopped", "", notReady, info("/run/netns/stopped")),
			"stopping": statusResp("stopping", "uid-stopping", "203.0.113.6", notReady, info("/run/netns/stopping")),
			"nonetns":  statusResp("nonetns", "uid-nonetns", "203.0.113.7", ready, nil),
			"nonetns2": statusResp("nonetns2", "uid-nonetns2", "203.0.113.8", ready, map[string]string{"info": "{}"}),
			"ok2":      statusResp("ok2", "uid-ok2", "203.0.113.9", ready, info("/run/netns/ok2")),
		},
		errs: map[string]error{"gone": status.Error(codes.NotFound, "an error occurred when try to find sandbox: not found")},
	}
	ctx := testCtx(t)
	l, err := cri.Dial(ctx, serve(t, f))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	pods, unreadable, err := l.RunningPods(ctx)
	var uids []string
	for _, p := range pods {
		uids = append(uids, p.UID)
	}
	if strings.Join(uids, ",") != "uid-ok,uid-badip,uid-ok2" {
		t.Errorf("RunningPods UIDs = %q; want the ready, enrollable sandboxes in list order", uids)
	}
	if len(pods) > 0 && (pods[0].NetnsPath != "/run/netns/ok" || len(pods[0].IPs) != 1 || pods[0].IPs[0].String() != "203.0.113.5") {
		t.Errorf("pod ok = %+v", pods[0])
	}
	if len(pods) > 1 && len(pods[1].IPs) != 0 {
		t.Errorf("pod badip IPs = %v; want the unparsable one left out", pods[1].IPs)
	}
	if err == nil || !strings.Contains(err.Error(), "nonetns") || !strings.Contains(err.Error(), "nonetns2") ||
		strings.Contains(err.Error(), "gone") || strings.Contains(err.Error(), "stopping") {
		t.Errorf("RunningPods error = %v; want one naming the sandboxes nonetns and nonetns2 only", err)
	}
	if strings.Join(unreadable, ",") != "uid-nonetns,uid-nonetns2" {
		t.Errorf("RunningPods unreadable = %q; want the running sandboxes left out", unreadable)
	}
	for _, v := range f.verbose {
		if !v {
			t.Error("PodSandboxStatus called without verbose")
		}
	}

	// Any other status failure: that pod is left out, named as running.
	f.errs["ok2"] = status.Error(codes.Unavailable, "shim not answering")
	if pods, unreadable, err := l.RunningPods(ctx); len(pods) != 2 || !slices.Contains(unreadable, "uid-ok2") || err == nil || !strings.Contains(err.Error(), "ok2") {
		t.Errorf("RunningPods with a failing status = %v, %v, %v; want the other pods, uid-ok2 unreadable and an error naming ok2", pods, unreadable, err)
	}
	f.listErr = status.Error(codes.Internal, "boom")
	if pods, _, err := l.RunningPods(ctx); pods != nil || err == nil {
		t.Errorf("RunningPods with a failing list = %v, %v; want no list and an error", pods, err)
	}

	// No sandboxes: an empty list, not nil (nil means do not reconcile).
	f.listErr, f.sandboxes = nil, nil
	if pods, _, err := l.RunningPods(ctx); pods == nil || len(pods) != 0 || err != nil {
		t.Errorf("RunningPods on an empty node = %#v, %v; want an empty list", pods, err)
	}
}
