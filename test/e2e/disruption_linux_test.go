package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// disruptionPods is how many mesh pods run through every lifecycle event.
const disruptionPods = 50

// TestNoMeshConnectionDropped: with mesh pods running, no lifecycle event
// of meshlet, the runtime or the ztunnel connection disrupts a pod at a
// ztunnel that behaves as the real one (zdstest.State: it keeps its
// proxies across connections and drains, at a snapshot's end, every pod
// the snapshot left out). After each event every pod is still enrolled
// (the invariant), no proxy of a running pod was drained or restarted, and
// meshlet broke no protocol rule. A pod removed while meshlet was away is
// still drained.
func TestNoMeshConnectionDropped(t *testing.T) {
	e := theEnv(t)
	m, zt := followedMesh(t, 15*time.Second, "--standalone")
	var pods []*pod
	for range disruptionPods {
		pods = append(pods, runPodIn(t, e, "app", ambient, false))
	}
	check := func(event string) {
		t.Helper()
		undisrupted(t, m, zt, pods, event, 30*time.Second)
		proxies := zt.ztunnel().Proxies()
		for _, p := range pods {
			if got, want := proxies[p.spec.UID], inode(t, p.info.NetnsPath); got != want {
				t.Fatalf("%s: pod %s's proxy runs in netns %d, want %d", event, p.spec.Name, got, want)
			}
		}
	}
	restart := func(stop func() error) {
		t.Helper()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		m.startMeshlet()
		if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	check("enrollment")

	restart(func() error { return m.meshlet.Stop() })
	check("meshlet SIGTERM and start")

	restart(func() error { return m.meshlet.Kill() })
	check("meshlet kill -9 and start")

	// Killed before its checkpoint named every pod (it writes every 2 s):
	// the restarted meshlet learns of that pod only from the runtime.
	restart(func() error {
		if err := m.meshlet.Kill(); err != nil {
			return err
		}
		return dropFromCheckpoint(e.MeshletStateDir(), pods[0].spec.UID)
	})
	check("meshlet kill -9, a pod missing from its checkpoint, and start")

	// Killed in the middle of a checkpoint write: the write's temporary
	// file is left, cut short, beside the complete previous checkpoint.
	restart(func() error {
		if err := m.meshlet.Kill(); err != nil {
			return err
		}
		return leaveCutWrite(e.MeshletStateDir())
	})
	check("meshlet kill -9 in the middle of a checkpoint write, and start")
	if left, _ := filepath.Glob(filepath.Join(e.MeshletStateDir(), state.FileName+".tmp-*")); len(left) > 0 {
		t.Fatalf("the restarted meshlet left the cut write %v", left)
	}

	// Killed in the middle of a hook: a new pod's Add is at ztunnel,
	// unanswered, when meshlet dies. The runtime then starts the pod or
	// refuses it; a pod it starts is enrolled by the next meshlet, one it
	// refuses has no proxy at ztunnel.
	if started := killInHook(t, e, m, zt); started != nil {
		pods = append(pods, started)
	}
	check("meshlet kill -9 in the middle of a RunPodSandbox hook, and start")

	// Removed while meshlet is away: ztunnel drains it; the rest stay.
	gone := pods[len(pods)-1]
	pods = pods[:len(pods)-1]
	restart(func() error {
		if err := m.meshlet.Stop(); err != nil {
			return err
		}
		return e.RemovePod(gone.id)
	})
	check("a pod removed while meshlet is stopped")
	if c := zt.ztunnel().Counts(gone.spec.UID); c.Drains != 1 {
		t.Fatalf("the pod removed while meshlet was away: %+v, want its proxy drained once", c)
	}

	if err := e.RestartRuntime(); err != nil {
		t.Fatal(err)
	}
	if err := m.meshlet.WaitReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	check("runtime restart")

	// A reconnect storm: ztunnel's connection drops again and again; it
	// redials each time, as the real one does.
	for range 20 {
		zt.current().zt.Stop()
	}
	check("20 ztunnel reconnects")

	// ztunnel restarts: its state is new, every pod is handed to it again.
	zt.restartZtunnel()
	check("ztunnel restart")
	for _, p := range pods {
		if c := zt.ztunnel().Counts(p.spec.UID); c.Starts != 1 {
			t.Fatalf("after the ztunnel restart, pod %s: %+v, want its proxy started once", p.spec.Name, c)
		}
	}

	// A restarted ztunnel refuses every pod for a while (its replay
	// NACKed): each keeps its rules, meshlet status says ztunnel refused
	// it, and meshlet's retries (or ztunnel's own) bring each in once
	// ztunnel takes pods again.
	var refusing atomic.Bool
	refusing.Store(true)
	zt.setDecide(func(r *zdstest.Request) string {
		if r.Kind == zdstest.Add && refusing.Load() {
			return "netns not ready (test)"
		}
		return ""
	})
	zt.restartZtunnel()
	waitFor(t, "meshlet status naming every pod refused by ztunnel", func() bool {
		out, err := exec.Command(e.Meshlet, "status", "--state-dir="+e.MeshletStateDir()).CombinedOutput()
		return err == nil && strings.Count(string(out), "refused: netns not ready (test)") == len(pods)
	})
	for _, p := range pods {
		if !hasRules(t, p.info.NetnsPath) {
			t.Fatalf("pod %s, refused by ztunnel while running, lost its rules", p.spec.Name)
		}
	}
	refusing.Store(false)
	zt.setDecide(nil)
	waitFor(t, "ztunnel taking every pod it refused", func() bool {
		proxies := zt.ztunnel().Proxies()
		for _, p := range pods {
			if _, runs := proxies[p.spec.UID]; !runs {
				return false
			}
		}
		return true
	})
	check("a restarted ztunnel refusing every pod, then taking them")
	for _, p := range pods {
		if c := zt.ztunnel().Counts(p.spec.UID); c.Starts != 1 {
			t.Fatalf("after the refusals, pod %s: %+v, want its proxy started once", p.spec.Name, c)
		}
	}
}

// TestRestartWithTheAPIServerDown: meshlet restarts while the API server,
// the only holder of the namespace label that selects the mesh pods, is
// down. The restarted meshlet waits for the API server (bounded), then
// lists the runtime's pods and keeps the ones the previous meshlet meshed
// as they were: no pod leaves the mesh, ztunnel's snapshot names them all
// (no proxy drained or restarted), and once the API server is back they
// stay enrolled.
func TestRestartWithTheAPIServerDown(t *testing.T) {
	e := theEnv(t)
	bin := privtest.RequireEnv(t, "MESHLET_KUBE_BIN", "the directory test/env/install-kube.sh prints (`make test` sets it)")
	k, err := kubeenv.StartIn(bin, t.TempDir(), e.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop) // after meshlet's stop: cleanups run last first
	c, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "app-restart" // labelled for the mesh in the API only
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ambient}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reviews"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := k.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	m, zt := followedMesh(t, 30*time.Second, "--kubeconfig="+kubeconfig, "--dra=false")
	var pods []*pod
	for i := range disruptionPods {
		apiPod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restart-%d", i)},
			Spec: corev1.PodSpec{NodeName: env.NodeName, ServiceAccountName: "reviews", AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "app", Image: env.Image}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := &pod{spec: env.PodSpec{Name: apiPod.Name, Namespace: ns, UID: string(apiPod.UID)}}
		if p.id, err = e.RunPod(p.spec); err != nil {
			t.Fatalf("run pod %s: %v", p.spec.Name, err)
		}
		t.Cleanup(func() { _ = e.RemovePod(p.id) })
		if p.info, err = e.InspectPod(p.id); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	check := func(event string, bound time.Duration) {
		t.Helper()
		cur := undisrupted(t, m, zt, pods, event, bound)
		for _, r := range cur.zt.Requests() {
			if r.Kind == zdstest.Add && r.Info.GetServiceAccount() != "reviews" {
				t.Fatalf("%s: ztunnel got %s with service account %q, want reviews", event, r, r.Info.GetServiceAccount())
			}
		}
	}
	check("enrollment", 30*time.Second)

	if err := k.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := m.meshlet.Stop(); err != nil {
		t.Fatal(err)
	}
	m.startMeshlet()
	// The new meshlet waits up to 30 s for the API server before it
	// serves the runtime; the snapshot waits for the runtime's listing.
	check("meshlet restarted while the API server is down", 90*time.Second)
	for _, p := range pods {
		if d, _ := debugPod(t, e.MeshletStateDir(), p.spec.UID); d.State != "enrolled" || d.Reason != enroll.ReasonKeptUnknown {
			t.Fatalf("pod %s without the API server: %s (%s), want enrolled, %s", p.spec.Name, d.State, d.Reason, enroll.ReasonKeptUnknown)
		}
	}

	if err := k.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := m.meshlet.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		waitFor(t, "pod "+p.spec.Name+" decided by its namespace's label again", func() bool {
			d, ok := debugPod(t, e.MeshletStateDir(), p.spec.UID)
			return ok && d.State == "enrolled" && d.Reason == "namespace-label"
		})
	}
	check("the API server back", 30*time.Second)
}

// followedMesh starts meshlet with flags, and a ztunnel stand-in that
// follows it across restarts as the real one does; it waits, at most
// ready, for meshlet to be ready. meshlet stops when the test ends.
func followedMesh(t *testing.T, ready time.Duration, flags ...string) (*mesh, *ztunnelFollower) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "zt.sock")
	m := &mesh{t: t, env: theEnv(t), socket: socket, flags: flags}
	m.startMeshlet()
	t.Cleanup(func() {
		if m.meshlet != nil {
			if err := m.meshlet.Stop(); err != nil {
				t.Errorf("meshlet stop: %v", err)
			}
		}
	})
	zt := followZtunnel(t, socket)
	if err := m.meshlet.WaitReady(ready); err != nil {
		t.Fatal(err)
	}
	return m, zt
}

// undisrupted waits, at most bound, for the invariant to hold for pods
// after event, and fails if ztunnel drained or restarted the proxy of any
// of them or saw meshlet break its protocol. It returns the stand-in's
// current session.
func undisrupted(t *testing.T, m *mesh, zt *ztunnelFollower, pods []*pod, event string, bound time.Duration) *mesh {
	t.Helper()
	cur := zt.current()
	cur.meshlet = m.meshlet
	took := cur.waitInvariant(t, bound, pods, nil)
	uids := make([]string, len(pods))
	for i, p := range pods {
		uids[i] = p.spec.UID
	}
	if d := zt.ztunnel().Disruptions(uids...); len(d) > 0 {
		t.Fatalf("%s disrupted %d of %d running mesh pods:\n%s", event, len(d), len(pods), strings.Join(d, "\n"))
	}
	if v := zt.ztunnel().Violations(); len(v) > 0 {
		t.Fatalf("%s: meshlet broke ztunnel's protocol: %q", event, v)
	}
	t.Logf("%s: every pod enrolled after %v; no proxy drained or restarted", event, took.Round(time.Millisecond))
	return cur
}

// dropFromCheckpoint rewrites meshlet's checkpoint without the pod, as a
// meshlet killed before its next checkpoint write leaves it.
func dropFromCheckpoint(dir, uid string) error {
	cp, err := state.Load(dir)
	if err != nil {
		return err
	}
	kept := slices.DeleteFunc(cp.Pods, func(r enroll.Record) bool { return r.UID == uid })
	if len(kept) == len(cp.Pods) {
		return fmt.Errorf("pod %s is not in the checkpoint", uid)
	}
	return state.Save(dir, cp.BootID, kept)
}

// leaveCutWrite leaves in dir what a meshlet killed in the middle of a
// checkpoint write leaves: the write's temporary file, cut short.
func leaveCutWrite(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, state.FileName))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, state.FileName+".tmp-1234567"), b[:len(b)/2], 0o600)
}

// killInHook kills meshlet while a new mesh pod's RunPodSandbox hook waits
// for ztunnel's answer to its Add, and starts meshlet again. It returns
// the pod if the runtime started it, nil if it refused it (then ztunnel
// runs no proxy for it).
func killInHook(t *testing.T, e *env.Env, m *mesh, zt *ztunnelFollower) *pod {
	t.Helper()
	p := &pod{spec: env.PodSpec{Name: "in-flight", Namespace: "app", UID: fmt.Sprintf("uid-in-flight-%d", time.Now().UnixNano()), Labels: ambient}}
	stalled := make(chan struct{})
	var once sync.Once
	zt.setDecide(func(r *zdstest.Request) string {
		if r.Kind == zdstest.Add && r.UID == p.spec.UID {
			once.Do(func() { close(stalled) })
			return zdstest.Stall
		}
		return ""
	})
	type result struct {
		id  string
		err error
	}
	ran := make(chan result, 1)
	go func() {
		id, err := e.RunPod(p.spec)
		ran <- result{id, err}
	}()
	select {
	case <-stalled:
	case r := <-ran:
		t.Fatalf("RunPodSandbox returned (%v) before its Add reached ztunnel", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the new pod's Add never reached ztunnel")
	}
	if err := m.meshlet.Kill(); err != nil {
		t.Fatal(err)
	}
	zt.setDecide(nil)
	r := <-ran
	m.startMeshlet()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if r.err != nil {
		t.Logf("the runtime refused the pod whose hook meshlet died in: %v", r.err)
		zt.current() // the new meshlet's snapshot is in
		if _, runs := zt.ztunnel().Proxies()[p.spec.UID]; runs {
			t.Fatalf("ztunnel runs a proxy for the pod the runtime refused")
		}
		return nil
	}
	p.id = r.id
	t.Cleanup(func() { _ = e.RemovePod(p.id) })
	var err error
	if p.info, err = e.InspectPod(p.id); err != nil {
		t.Fatal(err)
	}
	t.Logf("the runtime started the pod whose hook meshlet died in")
	return p
}
