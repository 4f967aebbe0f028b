package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/draplugin"
	gateserver "github.com/meshlet/meshlet/draplugin/gate/server"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
)

// runtimeMatrix is every runtime the NRI tests run on, each with the
// variable its installer's directory comes in (make test sets them all)
// and what sets it apart, as deploy/README's runtime table says.
var runtimeMatrix = []matrixRuntime{
	{runtime: env.Containerd, binVar: "MESHLET_E2E_BIN", installer: "test/env/install-runtime.sh", eventsCarryIPs: true,
		removalAfterRestart: removalMissed},
	{runtime: env.Containerd17, binVar: "MESHLET_CONTAINERD17_BIN", installer: "test/env/install-containerd17.sh",
		removalAfterRestart: removalEither},
	{runtime: env.CRIO, binVar: "MESHLET_CRIO_BIN", installer: "test/env/install-crio.sh", eventsCarryIPs: true,
		removalAfterRestart: removalReported},
}

type matrixRuntime struct {
	runtime   env.Runtime
	binVar    string
	installer string
	// eventsCarryIPs: the runtime's NRI events give a pod's IPs (else
	// meshlet reads them from the pod's namespace, and says so once).
	eventsCarryIPs bool
	// removalAfterRestart: how meshlet learns that a pod from before the
	// runtime's restart was removed.
	removalAfterRestart removalNews
}

// removalNews is how meshlet learns of a removal.
type removalNews int

const (
	// removalMissed: the runtime does not report it; the CRI resync finds
	// it (counted in meshlet_missed_removals_total).
	removalMissed removalNews = iota
	// removalReported: the runtime reports it (StopPodSandbox or
	// RemovePodSandbox), before the resync could.
	removalReported
	// removalEither: sometimes reported, sometimes found by the resync.
	removalEither
)

// runtimeEnvs are the environments of the runtimes other than the shared
// containerd: each starts at its first test (once, whichever test of that
// runtime comes first) and lives until TestMain stops them
// (stopRuntimeEnvs).
var runtimeEnvs = struct {
	sync.Mutex
	each map[env.Runtime]*runtimeEnvOnce
}{each: map[env.Runtime]*runtimeEnvOnce{}}

type runtimeEnvOnce struct {
	once sync.Once
	env  *env.Env
	err  error
	dir  string
}

// onEachRuntime runs body once per runtime of the matrix, as subtests named
// after the runtimes, side by side (each runtime is an environment of its
// own: netns, sockets, meshlet).
func onEachRuntime(t *testing.T, body func(t *testing.T, e *env.Env, rt matrixRuntime)) {
	for _, rt := range runtimeMatrix {
		t.Run(string(rt.runtime), func(t *testing.T) {
			t.Parallel()
			body(t, runtimeEnv(t, rt), rt)
		})
	}
}

// runtimeEnv returns the runtime's environment, started on first use. A
// runtime whose binaries are missing skips the test, or fails it with
// CI=true, naming the variable; one that does not start fails every test
// on it with the reason.
func runtimeEnv(t testing.TB, rt matrixRuntime) *env.Env {
	t.Helper()
	shared := theEnv(t) // root, and crictl, as every runtime's tests need
	if rt.runtime == env.Containerd {
		return shared
	}
	bin := privtest.RequireEnv(t, rt.binVar, fmt.Sprintf("%s tests need the directory %s prints; `make test` sets it", rt.runtime, rt.installer))
	runtimeEnvs.Lock()
	o := runtimeEnvs.each[rt.runtime]
	if o == nil {
		o = &runtimeEnvOnce{}
		runtimeEnvs.each[rt.runtime] = o
	}
	runtimeEnvs.Unlock()
	o.once.Do(func() {
		if o.dir, o.err = os.MkdirTemp("", "mle2e-"+strings.ReplaceAll(string(rt.runtime), ".", "")); o.err != nil {
			return
		}
		o.env, o.err = env.Start(env.Options{BinDir: shared.BinDir(), Runtime: rt.runtime, RuntimeBinDir: bin, Dir: o.dir,
			Logf: func(f string, a ...any) {
				fmt.Fprintf(os.Stderr, "e2e %s: "+f+"\n", append([]any{rt.runtime}, a...)...)
			}})
	})
	if o.err != nil {
		t.Fatalf("%s did not start: %v", rt.runtime, o.err)
	}
	return o.env
}

// stopRuntimeEnvs stops the runtimes' environments; it reports whether all
// stopped cleanly. Their directories are removed when ok and they did.
func stopRuntimeEnvs(ok bool) bool {
	runtimeEnvs.Lock()
	defer runtimeEnvs.Unlock()
	clean := true
	for rt, o := range runtimeEnvs.each {
		if o.env != nil {
			if err := o.env.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e %s teardown: %v\n", rt, err)
				clean = false
			}
		}
		switch {
		case o.dir == "":
		case ok && clean && o.err == nil:
			os.RemoveAll(o.dir)
		default:
			fmt.Fprintf(os.Stderr, "e2e %s: logs kept in %s/logs\n", rt, o.dir)
		}
	}
	return clean
}

// TestEnrollmentFailureRefusesPod: with meshlet connected, a pod that must
// join the mesh and cannot (ztunnel refuses it) does not run: the runtime
// fails its sandbox with meshlet's reason, and meshlet leaves nothing of
// it on the node. Every runtime honours a plugin's error from
// RunPodSandbox; this is the part of failing closed that needs no runtime
// setting.
func TestEnrollmentFailureRefusesPod(t *testing.T) { onEachRuntime(t, testEnrollmentFailureRefusesPod) }

func testEnrollmentFailureRefusesPod(t *testing.T, e *env.Env, _ matrixRuntime) {
	m := startMeshIn(t, e)
	m.zt.Stop()
	const reason = "workload refused (test)"
	m.connectZtunnelDeciding(func(r *zdstest.Request) string {
		if r.Kind == zdstest.Add {
			return reason
		}
		return ""
	})
	spec := env.PodSpec{Name: "refused", Namespace: "app", UID: fmt.Sprintf("uid-refused-%d", podSeq.Add(1)), Labels: ambient}
	id, err := e.RunPod(spec)
	if err == nil {
		_ = e.RemovePod(id)
		t.Fatalf("%s ran a mesh pod ztunnel refused", e.Runtime())
	}
	if !strings.Contains(err.Error(), "could not be enrolled") {
		t.Fatalf("the sandbox failed, but not with meshlet's reason: %v", err)
	}
	// Not running. (Whether the runtime has dropped its record of the
	// failed sandbox yet is its own affair: containerd 2.4.2 sometimes
	// still lists it, not ready, for a moment.)
	ids, err := e.Crictl("pods", "-q", "--state", "ready", "--name", "^refused$")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(ids) != "" {
		t.Fatalf("%s runs the refused pod's sandbox: %q", e.Runtime(), ids)
	}
	if len(m.adds(spec.UID)) == 0 {
		t.Fatalf("ztunnel never saw the pod: it was refused before enrollment was tried")
	}
	// Nothing of it is left on the node either: no other pod runs here,
	// so the node's probe SNAT set must be empty.
	if snat, err := e.Exec("nft", "list", "set", "inet", "meshlet", "probe-pods-v4"); err != nil || strings.Contains(snat, "elements") {
		t.Fatalf("the node's probe SNAT set after the refusal (%v):\n%s", err, snat)
	}
}

// TestContainerGate: the container gate, meshlet's own fail-closed lever
// on runtimes without an NRI validator, works on each runtime: the
// runtime applies the gate's CDI device and runs its createRuntime hook,
// the real meshlet-gate, which refuses the container while nothing
// answers on the gate's socket and lets it start once the answer is that
// the pod is enrolled. The answer comes from meshlet's gate server, run
// here in the test with the enrolled pod's record given to it: the
// subject is the runtime running the hook (TestGate covers meshlet itself
// answering, on the cluster).
func TestContainerGate(t *testing.T) { onEachRuntime(t, testContainerGate) }

func testContainerGate(t *testing.T, e *env.Env, _ matrixRuntime) {
	cfg := draplugin.Config{DriverName: draplugin.DefaultDriverName, Gate: draplugin.GateConfig{Enabled: true,
		CDISpecDir: e.CDISpecDir(), HookDir: e.GateHookDir(), HookBinary: filepath.Join(filepath.Dir(e.Meshlet), draplugin.GateBinaryName),
		Socket: e.GateSocket(), Timeout: time.Second}}
	if err := cfg.InstallGate(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cfg.RemoveGate(); err != nil {
			t.Errorf("remove the gate: %v", err)
		}
	})
	// Tolerating meshlet's absence, so that on containerd 2.x the gate,
	// not the NRI validator, is what refuses.
	spec := env.PodSpec{Name: "gated", Namespace: "app", UID: fmt.Sprintf("uid-gated-%d", podSeq.Add(1)),
		Annotations: map[string]string{tolerateMissingMeshlet: "true"}}
	id, err := e.RunPod(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.RemovePod(id) })
	info, err := e.InspectPod(id)
	if err != nil {
		t.Fatal(err)
	}
	p := &pod{spec: spec, id: id, info: info}
	_, err = e.StartContainerWithCDI(p.id, p.spec, "refused", cfg.CDIDeviceID())
	if err == nil || !strings.Contains(err.Error(), "meshlet-gate: container refused: meshlet did not answer") {
		t.Fatalf("%s started a gated container with no one answering the gate: %v", e.Runtime(), err)
	}

	rec := enroll.Record{UID: p.spec.UID, Name: p.spec.Name, Namespace: p.spec.Namespace, NetnsInode: inode(t, p.info.NetnsPath)}
	srv, err := gateserver.Listen(gateserver.Config{SocketPath: e.GateSocket(), Timeout: time.Second, MaxConcurrent: 4}, enrolledPod(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("gate server: %v", err)
		}
		_ = srv.Close()
	})
	if _, err := e.StartContainerWithCDI(p.id, p.spec, "allowed", cfg.CDIDeviceID()); err != nil {
		t.Fatalf("%s refused a gated container of an enrolled pod: %v", e.Runtime(), err)
	}
}

// enrolledPod is the core's view with one enrolled pod: what the gate
// server answers from.
type enrolledPod enroll.Record

var _ gateserver.Enrollments = enrolledPod{}

func (p enrolledPod) Record(uid string) (enroll.Record, bool) {
	return enroll.Record(p), uid == p.UID
}

func (p enrolledPod) RecordInNetns(inode uint64) (enroll.Record, bool) {
	return enroll.Record(p), inode == p.NetnsInode
}

func (p enrolledPod) Status(uid string) (enroll.PodStatus, bool) {
	return enroll.PodStatus{}, false
}
