package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/gate"
	"github.com/meshlet/meshlet/draplugin/gate/server"
	"github.com/meshlet/meshlet/internal/privtest"
)

const childEnv = "MESHLET_TEST_GATE_CHILD_SOCKET"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		_, err := gate.Ask(path, &gate.Request{NetnsInode: 1, ContainerID: "c"}, 2*time.Second)
		fmt.Println("asked:", err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// view stands in for the enrollment core's read-only view, which is all
// the server reads: a map of records and states, so that each test names
// the pods it needs. The end-to-end tests answer from the real core.
type view struct {
	mu      sync.Mutex
	records map[string]enroll.Record
	states  map[string]enroll.PodStatus
}

func (v *view) Record(uid string) (enroll.Record, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.records[uid]
	return r, ok
}

func (v *view) RecordInNetns(inode uint64) (enroll.Record, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range v.records {
		if r.NetnsInode == inode {
			return r, true
		}
	}
	return enroll.Record{}, false
}

func (v *view) Status(uid string) (enroll.PodStatus, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.states[uid]
	return s, ok
}

var _ server.Enrollments = (*view)(nil)

type decisions struct {
	mu  sync.Mutex
	got []server.Decision
}

func (d *decisions) observe(dec server.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, dec)
}

func (d *decisions) list() []server.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]server.Decision(nil), d.got...)
}

// serve starts a server on a socket in a temporary directory.
func serve(t testing.TB, v server.Enrollments) (*server.Server, *decisions) {
	t.Helper()
	d := &decisions{}
	s, err := server.Listen(server.Config{SocketPath: filepath.Join(t.TempDir(), "gate.sock"), Observe: d.observe}, v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s, d
}

// ownNetns is the test process's network namespace inode: the hook, run
// in-process with the test's pid in the state, finds it.
func ownNetns(t testing.TB) uint64 {
	t.Helper()
	ino, err := gate.NetnsInode(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// state is the OCI state the runtime passes, for a container of this
// process (its pid, so its network namespace) in pod podUID.
func state(podUID string) []byte {
	ann := map[string]string{"io.kubernetes.cri.sandbox-id": "sb1"}
	if podUID != "" {
		ann["io.kubernetes.cri.sandbox-uid"] = podUID
	}
	b, _ := json.Marshal(map[string]any{"ociVersion": "1.2.1", "id": "ctr1", "status": "creating", "pid": os.Getpid(), "annotations": ann})
	return b
}

func runHook(socket string, timeout time.Duration, stdin []byte) (int, string) {
	var stderr bytes.Buffer
	code := gate.Main([]string{"--socket=" + socket, "--timeout=" + timeout.String()}, bytes.NewReader(stdin), &stderr)
	return code, stderr.String()
}

// TestHookAsksMeshlet: the hook lets a container start only when a pod
// this meshlet enrolled holds its network namespace (and, when the runtime
// names the pod and its sandbox, it is that pod in that sandbox). A
// previous meshlet's record is never in the view the hook reads
// (enroll's TestCheckpointNamesTheCurrentSandbox). Every refusal says why
// on stderr, which the runtime puts in the container's start error.
func TestHookAsksMeshlet(t *testing.T) {
	privtest.RequireRoot(t)
	ino := ownNetns(t)
	v := &view{
		records: map[string]enroll.Record{
			"web-uid": {UID: "web-uid", SandboxID: "sb1", Name: "web", Namespace: "apps", NetnsInode: ino},
			// Enrolled in an earlier sandbox, whose namespace inode
			// the container's reuses.
			"replaced-uid": {UID: "replaced-uid", SandboxID: "sb0", Name: "api", Namespace: "apps", NetnsInode: ino},
		},
		states: map[string]enroll.PodStatus{
			"web-uid":    {UID: "web-uid", Name: "web", Namespace: "apps", State: enroll.StateEnrolled},
			"failed-uid": {UID: "failed-uid", Name: "db", Namespace: "apps", State: enroll.StateFailed, Reason: "netns: the pod's IPs are not on any of its interfaces: 10.0.0.9"},
		},
	}
	s, d := serve(t, v)
	for _, tc := range []struct {
		name   string
		stdin  []byte
		code   int
		stderr string
	}{
		{"the enrolled pod", state("web-uid"), gate.ExitAllowed, ""},
		{"no pod UID: the namespace decides", state(""), gate.ExitAllowed, ""},
		{"a pod meshlet never saw", state("ghost-uid"), gate.ExitRefused, "meshlet has not enrolled pod ghost-uid"},
		{"a pod enrolled in another sandbox", state("replaced-uid"), gate.ExitRefused, "the container's sandbox sb1 is not the one pod apps/api is enrolled in (sb0)"},
		{"a pod whose enrollment failed", state("failed-uid"), gate.ExitRefused, "pod apps/db is not in the mesh: failed (netns: the pod's IPs"},
		{"a malformed state", []byte(`{"ociVersion":"1.2.1","id":"c"}`), gate.ExitRefused, "pid: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runHook(s.Addr(), 2*time.Second, tc.stdin)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) || (tc.code == gate.ExitAllowed) != (stderr == "") {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
		})
	}
	// The pod is enrolled, but in another namespace than the container's.
	v.mu.Lock()
	v.records["web-uid"] = enroll.Record{UID: "web-uid", Name: "web", Namespace: "apps", NetnsInode: ino + 1}
	delete(v.records, "replaced-uid")
	v.mu.Unlock()
	code, stderr := runHook(s.Addr(), 2*time.Second, state("web-uid"))
	if want := fmt.Sprintf("the container's network namespace (inode %d) is not the one pod apps/web is enrolled in (inode %d)", ino, ino+1); code != gate.ExitRefused || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, stderr %q; want a refusal naming both namespaces", code, stderr)
	}
	code, stderr = runHook(s.Addr(), 2*time.Second, state(""))
	if code != gate.ExitRefused || !strings.Contains(stderr, "no pod in the mesh has the container's network namespace") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	got := d.list()
	want := []server.Decision{server.Allowed, server.Allowed, server.Refused, server.Refused, server.Refused, server.Refused, server.Refused}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decisions %v, want %v (the malformed state never reaches meshlet)", got, want)
	}
}

// TestHookWithoutMeshlet: no meshlet on the socket, or one that does not
// answer within the deadline, refuses the container.
func TestHookWithoutMeshlet(t *testing.T) {
	privtest.RequireRoot(t)
	dir := t.TempDir()
	code, stderr := runHook(filepath.Join(dir, "absent.sock"), 2*time.Second, state("web-uid"))
	if code != gate.ExitRefused || !strings.Contains(stderr, "meshlet did not answer") || !strings.Contains(stderr, "no such file") {
		t.Fatalf("no socket: exit %d, stderr %q", code, stderr)
	}
	// A listener that accepts and never answers: a meshlet that hangs.
	stuck := filepath.Join(dir, "stuck.sock")
	ln, err := net.Listen(gate.Network, stuck)
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
	code, stderr = runHook(stuck, 200*time.Millisecond, state("web-uid"))
	if code != gate.ExitRefused || !strings.Contains(stderr, "did not answer within 200ms") || !strings.Contains(stderr, "timeout") {
		t.Fatalf("stuck meshlet: exit %d, stderr %q", code, stderr)
	}
}

// TestBadRequestsAnswered: a request meshlet cannot read is answered with
// a refusal that names the problem, and counted; the server goes on.
func TestBadRequestsAnswered(t *testing.T) {
	privtest.RequireRoot(t)
	s, d := serve(t, &view{})
	for msg, want := range map[string]string{
		`{"version":1,"netnsInode":0,"containerID":"c"}`: "netnsInode: missing",
		strings.Repeat("x", gate.MaxMessageSize+1):       "message larger than",
	} {
		c, err := net.Dial(gate.Network, s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := gate.ReadMessage(c)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp, err := gate.DecodeResponse(b)
		if err != nil || resp.Allow || !strings.Contains(resp.Reason, want) {
			t.Fatalf("answer %+v, %v; want a refusal containing %q", resp, err, want)
		}
	}
	if got := d.list(); fmt.Sprint(got) != fmt.Sprint([]server.Decision{server.Invalid, server.Invalid}) {
		t.Fatalf("decisions %v", got)
	}
}

// TestNonRootPeerRefused: a process that is not root is closed without an
// answer, even when the socket's mode lets it connect.
func TestNonRootPeerRefused(t *testing.T) {
	s, d := serve(t, &view{})
	if err := os.Chmod(s.Addr(), 0o666); err != nil {
		t.Fatal(err)
	}
	out := privtest.RunAsNobody(t, childEnv+"="+s.Addr(), filepath.Dir(s.Addr()), filepath.Dir(filepath.Dir(s.Addr())))
	// It connected (the mode let it), then got no answer.
	if !strings.Contains(out, "asked: ") || strings.Contains(out, "asked: <nil>") || strings.Contains(out, "connect to meshlet") {
		t.Fatalf("the non-root peer got: %s; want it connected and closed without an answer", out)
	}
	if got := d.list(); len(got) != 0 {
		t.Fatalf("decisions %v: the non-root peer's request was read", got)
	}
}
