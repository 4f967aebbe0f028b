package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/cnifallback/wire"
	"github.com/meshlet/meshlet/internal/privtest"
)

// childEnv makes the test binary act as a plugin that connects to the
// socket it names and reports the outcome (for the non-root peer test).
const childEnv = "MESHLET_TEST_CNI_CHILD_SOCKET"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		_, err := wire.Call(path, addRequest("child"), 2*time.Second)
		fmt.Println("child:", err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeCore stands in for the enrollment core (whose kernel-facing work is
// tested in agent/enroll, agent/redirect and the e2e suite): it records
// the calls and answers as configured.
type fakeCore struct {
	mu      sync.Mutex
	enrolls []enroll.Pod
	forgets []string
	result  enroll.Result
	err     error
	block   chan struct{} // when set, Enroll waits on it
}

func (f *fakeCore) Enroll(ctx context.Context, pod enroll.Pod) (enroll.Result, error) {
	f.mu.Lock()
	f.enrolls = append(f.enrolls, pod)
	block := f.block
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return enroll.Result{}, ctx.Err()
		}
	}
	return f.result, f.err
}

func (f *fakeCore) Forget(_ context.Context, uid, sandboxID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgets = append(f.forgets, uid+"/"+sandboxID)
	return nil
}

func addRequest(uid string) *wire.Request {
	return &wire.Request{Version: wire.Version, Command: wire.CommandAdd, ContainerID: "c-" + uid, Netns: "/var/run/netns/" + uid, IfName: "eth0",
		Pod: wire.Pod{Namespace: "shop", Name: uid, UID: uid}, IPs: []netip.Addr{netip.MustParseAddr("10.1.2.3")}}
}

func serve(t *testing.T, core Core, cfg Config) *Server {
	t.Helper()
	if cfg.SocketPath == "" {
		cfg.SocketPath = filepath.Join(t.TempDir(), "run", "cni.sock")
	}
	s, err := Listen(cfg, core)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.Close()
	})
	return s
}

// TestRequests: ADD and CHECK become Enroll with the pod's netns and
// addresses; the core's answer becomes the outcome; DEL becomes Forget.
func TestRequests(t *testing.T) {
	privtest.RequireRoot(t)
	core := &fakeCore{result: enroll.Result{Enrolled: true, Reason: "pod-label"}}
	s := serve(t, core, Config{})
	fi, err := os.Stat(s.Addr())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode(), err)
	}
	call := func(r *wire.Request) *wire.Response {
		t.Helper()
		resp, err := wire.Call(s.Addr(), r, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := call(addRequest("p1")); r.Outcome != wire.OutcomeEnrolled || r.Reason != "pod-label" {
		t.Fatalf("ADD: %+v", r)
	}
	core.mu.Lock()
	got := core.enrolls[0]
	core.mu.Unlock()
	if got.UID != "p1" || got.SandboxID != "c-p1" || got.Name != "p1" || got.Namespace != "shop" || got.NetnsPath != "/var/run/netns/p1" || fmt.Sprint(got.IPs) != "[10.1.2.3]" {
		t.Fatalf("Enroll got %+v", got)
	}
	check := addRequest("p1")
	check.Command = wire.CommandCheck
	if r := call(check); r.Outcome != wire.OutcomeEnrolled {
		t.Fatalf("CHECK: %+v", r)
	}

	core.result = enroll.Result{Enrolled: false, Reason: "not-selected"}
	if r := call(addRequest("p2")); r.Outcome != wire.OutcomeSkipped || r.Reason != "not-selected" {
		t.Fatalf("ADD of a skipped pod: %+v", r)
	}
	core.err = &enroll.Error{UID: "p3", Step: enroll.StepProxy, Err: errors.New("no ztunnel connected")}
	if r := call(addRequest("p3")); r.Outcome != wire.OutcomeFailed || r.Reason != "ztunnel" || !strings.Contains(r.Message, "no ztunnel") {
		t.Fatalf("ADD that fails: %+v", r)
	}

	del := &wire.Request{Version: wire.Version, Command: wire.CommandDel, ContainerID: "c-p1", IfName: "eth0", Pod: wire.Pod{UID: "p1"}}
	if r := call(del); r.Outcome != wire.OutcomeEnrolled {
		t.Fatalf("DEL: %+v", r)
	}
	core.mu.Lock()
	defer core.mu.Unlock()
	if fmt.Sprint(core.forgets) != "[p1/c-p1]" {
		t.Fatalf("Forget calls %v, want [p1/c-p1]: the pod, and the sandbox the DEL is for", core.forgets)
	}
}

// TestBadRequest: a request the server cannot accept is answered failed,
// naming the field, and never reaches the core.
func TestBadRequest(t *testing.T) {
	privtest.RequireRoot(t)
	core := &fakeCore{}
	s := serve(t, core, Config{})
	conn, err := netDial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(`{"version":1,"command":"ADD","containerID":"c","ifName":"eth0","pod":{"namespace":"a","name":"b","uid":"c"}}`)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, wire.MaxMessageSize)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeResponse(buf[:n])
	if err != nil || resp.Outcome != wire.OutcomeFailed || !strings.Contains(resp.Message, "netns: required for ADD") {
		t.Fatalf("answer %+v, %v; want failed naming netns", resp, err)
	}
	if len(core.enrolls) != 0 {
		t.Fatal("a refused request reached the core")
	}
}

// TestBoundedConcurrency: no more than MaxConcurrent requests reach the
// core at once; the rest wait and are served when one finishes.
func TestBoundedConcurrency(t *testing.T) {
	privtest.RequireRoot(t)
	core := &fakeCore{result: enroll.Result{Enrolled: true}, block: make(chan struct{})}
	s := serve(t, core, Config{MaxConcurrent: 2, Timeout: 10 * time.Second})
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := wire.Call(s.Addr(), addRequest(fmt.Sprintf("p%d", i)), 10*time.Second)
			errs <- err
		}()
	}
	inCore := func() int { core.mu.Lock(); defer core.mu.Unlock(); return len(core.enrolls) }
	deadline := time.Now().Add(5 * time.Second)
	for inCore() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// The third is accepted but waits for a slot. Nothing signals that it
	// waits, so give it time to (wrongly) reach the core before looking.
	time.Sleep(200 * time.Millisecond)
	if n := inCore(); n != 2 {
		t.Fatalf("%d requests in the core at once, want 2", n)
	}
	close(core.block)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := inCore(); n != 3 {
		t.Fatalf("%d requests served, want 3", n)
	}
}

// TestNonRootPeerRefused: a process that is not root gets no answer, even
// when the socket's mode would let it in (the peer check does not rely on
// the file mode).
func TestNonRootPeerRefused(t *testing.T) {
	core := &fakeCore{result: enroll.Result{Enrolled: true}}
	s := serve(t, core, Config{SocketPath: filepath.Join(t.TempDir(), "cni.sock")})
	if err := os.Chmod(s.Addr(), 0o666); err != nil {
		t.Fatal(err)
	}
	out := privtest.RunAsNobody(t, childEnv+"="+s.Addr(), filepath.Dir(s.Addr()), filepath.Dir(filepath.Dir(s.Addr())))
	if strings.Contains(out, "permission denied") {
		t.Fatalf("the non-root client could not reach the socket: %s; the peer check went untested", out)
	}
	// Refused at once: the client's send or its read of the answer fails,
	// whichever the closed connection reaches first.
	if !strings.Contains(out, "child: ") || strings.Contains(out, "child: <nil>") {
		t.Fatalf("the non-root client got: %s; want no answer", out)
	}
	if len(core.enrolls) != 0 {
		t.Fatal("a non-root client's request reached the core")
	}
}

func netDial(path string) (net.Conn, error) { return net.Dial(wire.Network, path) }
