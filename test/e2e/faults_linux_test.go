package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// fault is one way the node goes wrong during pod churn.
type fault struct {
	name string
	// inject breaks the node; it runs while the runtime creates a pod
	// (so some faults land inside meshlet's hook).
	inject func(t *testing.T, m *mesh)
	// recover brings the node back, three pods later.
	recover func(t *testing.T, m *mesh)
	// setup, if set, prepares the node before meshlet starts and returns
	// meshlet's flags beyond the test's own (nil: standalone).
	setup func(t *testing.T) []string
	// harmless: no pod may be refused even while the node is broken.
	harmless bool
	// place, if set, settles a pod before its sandbox is made: its
	// namespace, its labels and its UID (an API object's). Without it a
	// mesh pod is in namespace app with the mesh label of its own.
	place func(t *testing.T, spec *env.PodSpec, mesh bool)
	// check, if set, asserts what the fault made meshlet do, after the
	// invariant holds.
	check func(t *testing.T, m *mesh)
}

var faults = []fault{
	{
		name:   "meshlet killed",
		inject: func(_ *testing.T, m *mesh) { _ = m.meshlet.Kill() }, // SIGKILL: no shutdown step runs
		recover: func(t *testing.T, m *mesh) {
			m.zt.Stop()
			m.startMeshlet()
			m.connectZtunnel()
			if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		// containerd sends no stop or removal to NRI plugins for a sandbox
		// that was running when it restarted: meshlet learns of those
		// removals from its CRI listings.
		name: "containerd restarted",
		inject: func(t *testing.T, _ *mesh) {
			if err := theEnv(t).RestartRuntime(); err != nil {
				t.Error(err)
			}
		},
		// meshlet reconnects to the runtime by itself.
		recover: func(t *testing.T, m *mesh) {
			if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		// Only the checkpoint needs the state directory: enrollments go
		// on, and the file catches up once there is room again.
		name:     "state filesystem full",
		harmless: true,
		setup: func(t *testing.T) []string {
			dir := theEnv(t).MeshletStateDir()
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
				t.Fatalf("mount a small tmpfs on the state directory: %v: %s", err, out)
			}
			t.Cleanup(func() { // after meshlet's stop: cleanups run last first
				if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
					t.Errorf("umount %s: %v: %s", dir, err, out)
				}
			})
			return nil
		},
		inject: func(t *testing.T, _ *mesh) {
			if err := fill(filepath.Join(theEnv(t).MeshletStateDir(), "filler")); err != nil {
				t.Error(err)
			}
		},
		recover: func(t *testing.T, m *mesh) {
			// A pod was enrolled since the fill: a checkpoint write failed.
			for deadline := time.Now().Add(10 * time.Second); m.metric("meshlet_checkpoint_write_failures_total") == 0; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no checkpoint write failed on a full state filesystem")
				}
			}
			if err := os.Remove(filepath.Join(theEnv(t).MeshletStateDir(), "filler")); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		// Every new pod's Add is refused: its sandbox fails, the kubelet
		// would retry it.
		name: "ztunnel NACKs",
		inject: func(_ *testing.T, m *mesh) {
			m.zt.Stop()
			snapshotDone := false // Decide runs on the stand-in's one goroutine
			m.connectZtunnelDeciding(func(r *zdstest.Request) string {
				if r.Kind == zdstest.SnapshotSent {
					snapshotDone = true
				}
				if snapshotDone && r.Kind == zdstest.Add {
					return "workload refused (fault injected)"
				}
				return ""
			})
		},
		recover: func(_ *testing.T, m *mesh) { m.zt.Stop(); m.connectZtunnel() },
	},
	{
		// A new pod's Add is never answered: its enrollment runs out of
		// time in the hook, and meshlet drops the connection.
		name: "ztunnel stalls",
		inject: func(_ *testing.T, m *mesh) {
			m.zt.Stop()
			snapshotDone := false
			m.connectZtunnelDeciding(func(r *zdstest.Request) string {
				if r.Kind == zdstest.SnapshotSent {
					snapshotDone = true
				}
				if snapshotDone && r.Kind == zdstest.Add {
					return zdstest.Stall
				}
				return ""
			})
		},
		recover: func(_ *testing.T, m *mesh) { m.zt.Stop(); m.connectZtunnel() },
	},
	{
		name:    "ztunnel gone",
		inject:  func(_ *testing.T, m *mesh) { m.zt.Stop() },
		recover: func(_ *testing.T, m *mesh) { m.connectZtunnel() },
	},
}

// TestFaultsDuringChurn: while mesh and plain pods are created and
// removed (50 per fault), the node is broken five times at a random
// moment, some inside a runtime hook, and recovered three pods later.
// Throughout, an app container that the runtime starts in a mesh pod finds
// the pod's redirection in place; after the last recovery the invariant
// holds for every pod still running, within a bound. The seed is logged:
// MESHLET_FAULT_SEED replays a failure.
func TestFaultsDuringChurn(t *testing.T) {
	seed := faultSeed(t)
	for k, f := range faults {
		t.Run(f.name, func(t *testing.T) { churn(t, f, seed, k) })
	}
}

// TestAPIServerDownDuringChurn is TestFaultsDuringChurn's churn with the
// API server going away: the one fault that needs the control plane's
// binaries (MESHLET_KUBE_BIN), so the others run without them.
func TestAPIServerDownDuringChurn(t *testing.T) {
	churn(t, apiServerDown(), faultSeed(t), len(faults))
}

func churn(t *testing.T, f fault, seed uint64, k int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	// Removals the runtime does not report are found within seconds.
	flags := []string{"--standalone"}
	if f.setup != nil {
		if fl := f.setup(t); fl != nil {
			flags = fl
		}
	}
	m := startMesh(t, append(flags, "--cri-resync-interval=1s")...)
	// Every sandbox the runtime made, removed side by side at the end,
	// before meshlet stops (cleanups run last first).
	var sandboxes []string
	t.Cleanup(func() {
		if err := theEnv(t).RemovePods(sandboxes...); err != nil {
			t.Errorf("remove the churn's pods: %v", err)
		}
	})
	var live []*pod // in creation order: the seed replays the same removals
	mustMesh := map[*pod]bool{}
	const pods = 50
	var refused []*pod // the runtime may have made some anyway (below)
	refusedMesh := map[*pod]bool{}
	injected, refusedSandboxes, refusedApps := 0, 0, 0
	broken := false
	for i := range pods {
		if broken && i%10 == 8 {
			f.recover(t, m)
			broken = false
		}
		mesh := i%2 == 0
		p := &pod{spec: env.PodSpec{Name: fmt.Sprintf("churn-%d", i), Namespace: "app",
			UID: fmt.Sprintf("churn-%d-%d-%d", seed, k, i)}}
		if mesh {
			p.spec.Labels = ambient
		}
		if f.place != nil {
			f.place(t, &p.spec, mesh)
		}
		wasBroken := broken
		done := make(chan struct{})
		if i%10 == 5 && !broken {
			delay := time.Duration(rng.IntN(4000)) * time.Microsecond
			go func() {
				defer close(done)
				time.Sleep(delay)
				f.inject(t, m)
			}()
			injected++
			broken = true
		} else {
			close(done)
		}
		id, err := theEnv(t).RunPod(p.spec)
		<-done
		if err != nil {
			// Refused: a mesh pod meshlet could not enroll, or the
			// runtime away. The kubelet would retry. On a healthy node
			// nothing is refused.
			if !broken || f.harmless {
				t.Errorf("pod %s refused (fault %q active: %v): %v", p.spec.Name, f.name, broken, err)
			}
			refusedSandboxes++
			refused = append(refused, p)
			refusedMesh[p] = mesh
			continue
		}
		p.id = id
		sandboxes = append(sandboxes, id)
		if p.info, err = theEnv(t).InspectPod(id); err != nil {
			t.Fatal(err)
		}
		live = append(live, p)
		mustMesh[p] = mesh
		// The app container: if the runtime starts it in a mesh pod,
		// the pod was enrolled first (ztunnel's Add, which follows the
		// rules, is older than the container's start).
		enrolledBefore := hasTable(p.info.NetnsPath)
		if cid, err := theEnv(t).StartContainer(id, p.spec, "app"); err != nil {
			refusedApps++
			if f.harmless {
				t.Errorf("pod %s: app container refused during %q: %v", p.spec.Name, f.name, err)
			}
		} else if mesh && !enrolledBefore {
			checkEnrolledBeforeStart(t, m, p, cid, wasBroken || broken)
		}
		// Now and then a pod goes, picked by the seed.
		if i%5 == 4 && len(live) > 0 {
			k := rng.IntN(len(live))
			gone := live[k]
			if err := theEnv(t).StopPod(gone.id); err != nil {
				t.Fatal(err)
			}
			if err := theEnv(t).RemovePod(gone.id); err != nil {
				t.Fatal(err)
			}
			live = append(live[:k], live[k+1:]...)
			delete(mustMesh, gone)
			sandboxes = slices.DeleteFunc(sandboxes, func(id string) bool { return id == gone.id })
		}
	}
	if broken {
		f.recover(t, m)
	}
	// The pods whose sandbox the runtime made (runp succeeded) and that
	// still run went through every fault after it: ztunnel, which keeps
	// its proxies across connections, must not have drained or restarted
	// any of theirs.
	var ran []string
	for _, p := range live {
		ran = append(ran, p.spec.UID)
	}
	// A runp that failed because the runtime went away mid-request may
	// have left a sandbox that runs all the same (containerd finishes
	// it): meshlet must treat it like any other, so the invariant does.
	for _, p := range refused {
		ids, err := theEnv(t).Crictl("pods", "-q", "--state", "ready", "--namespace", p.spec.Namespace, "--name", "^"+p.spec.Name+"$")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range strings.Fields(ids) {
			sandboxes = append(sandboxes, id)
			q := &pod{spec: p.spec, id: id}
			if q.info, err = theEnv(t).InspectPod(id); err != nil {
				t.Fatal(err)
			}
			live = append(live, q)
			mustMesh[q] = refusedMesh[p]
			t.Logf("pod %s: its runp failed, but the runtime runs its sandbox", p.spec.Name)
		}
	}
	var meshed, plain []*pod
	for _, p := range live {
		if mustMesh[p] {
			meshed = append(meshed, p)
		} else {
			plain = append(plain, p)
		}
	}
	took := m.waitInvariant(t, 15*time.Second, meshed, plain)
	if d := m.state.Disruptions(ran...); len(d) > 0 {
		t.Errorf("%s disrupted pods at ztunnel:\n%s", f.name, strings.Join(d, "\n"))
	}
	if v := m.state.Violations(); len(v) > 0 {
		t.Errorf("%s: meshlet broke ztunnel's protocol: %q", f.name, v)
	}
	t.Logf("%s: %d pods, %d faults, %d sandboxes and %d app containers refused; %d mesh and %d plain pods running; the invariant held %v after the last recovery; the last meshlet counted %v late enrollments and %v missed removals",
		f.name, pods, injected, refusedSandboxes, refusedApps, len(meshed), len(plain), took.Round(time.Millisecond),
		m.metric("meshlet_late_enrollments_total"), m.metric("meshlet_missed_removals_total"))
	if f.check != nil {
		f.check(t, m)
	}
}

// checkEnrolledBeforeStart fails unless ztunnel had the pod (an Add on
// its current connection) before the runtime started container cid: the
// pod's table was not there before StartContainer, so the enrollment the
// runtime's hook waited for must predate the start.
func checkEnrolledBeforeStart(t *testing.T, m *mesh, p *pod, cid string, broken bool) {
	t.Helper()
	started := containerStarted(t, cid)
	if m.zt != nil {
		for _, r := range m.adds(p.spec.UID) {
			if r.At.Before(started) {
				return
			}
		}
	}
	t.Errorf("pod %s: its app container started at %v, before ztunnel had the pod (node broken: %t)", p.spec.Name, started, broken)
}

// faultSeed is MESHLET_FAULT_SEED, or a fresh one.
func faultSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("MESHLET_FAULT_SEED"); s != "" {
		var seed uint64
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("MESHLET_FAULT_SEED=%q: %v", s, err)
		}
		return seed
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (MESHLET_FAULT_SEED=%d replays it)", seed, seed)
	return seed
}

// apiServerDown: meshlet runs with an API server, which goes away. Mesh
// pods are selected by their namespace's label, which only the API server
// holds (their sandboxes carry no mesh label). A pod made while the API
// server is up has an API object (its UID the sandbox's), which meshlet
// may not have seen yet when the server goes; one made while it is down
// has none, as for a pod the API server cannot tell meshlet about. Either
// way meshlet decides from what it knows (the pod's object, else its
// sandbox's labels and the namespace's last known labels): no pod may be
// refused, nor a mesh pod left out, while the server is down.
func apiServerDown() fault {
	const meshNamespace = "app-mesh" // labelled for the mesh in the API only
	var (
		k    *kubeenv.Env
		c    kubernetes.Interface
		down bool // set by inject and recover, read before each pod's sandbox
	)
	return fault{
		name:     "API server down",
		harmless: true,
		setup: func(t *testing.T) []string {
			bin := privtest.RequireEnv(t, "MESHLET_KUBE_BIN", "the directory test/env/install-kube.sh prints (`make test` sets it)")
			var err error
			if k, err = kubeenv.StartIn(bin, t.TempDir(), theEnv(t).NetnsPath()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(k.Stop) // after meshlet's stop: cleanups run last first
			if c, err = kubernetes.NewForConfig(k.Config()); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for ns, labels := range map[string]map[string]string{"app": nil, meshNamespace: ambient} {
				if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			kubeconfig, err := k.Kubeconfig()
			if err != nil {
				t.Fatal(err)
			}
			return []string{"--kubeconfig=" + kubeconfig, "--dra=false"} // no kubelet here
		},
		place: func(t *testing.T, spec *env.PodSpec, mesh bool) {
			spec.Labels = nil
			if mesh {
				spec.Namespace = meshNamespace
			}
			if down {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			apiPod, err := c.CoreV1().Pods(spec.Namespace).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: spec.Name},
				Spec: corev1.PodSpec{NodeName: env.NodeName, AutomountServiceAccountToken: new(bool),
					Containers: []corev1.Container{{Name: "app", Image: env.Image}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("pod %s in the API: %v", spec.Name, err)
			}
			spec.UID = string(apiPod.UID)
		},
		inject: func(t *testing.T, _ *mesh) {
			down = true
			if err := k.StopAPIServer(); err != nil {
				t.Error(err)
			}
		},
		recover: func(t *testing.T, _ *mesh) {
			if err := k.StartAPIServer(); err != nil {
				t.Fatal(err)
			}
			down = false
		},
		// Pods made while the server was down (two or three each time)
		// were decided without it.
		check: func(t *testing.T, m *mesh) {
			n := m.metric("meshlet_pod_resolve_degraded_total")
			if n == 0 {
				t.Fatal("meshlet_pod_resolve_degraded_total 0: no pod was decided while the API server was down; the fault missed")
			}
			t.Logf("%v pods decided without the API server", n)
		},
	}
}

// fill writes zeros to path until its filesystem is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zeros := make([]byte, 4096)
	for {
		if _, err := f.Write(zeros); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return fmt.Errorf("fill %s: %w", path, err)
		}
	}
}

// TestNodeReboot: the node goes down under running mesh and plain pods
// (meshlet and ztunnel killed, every pod process gone with its network
// namespace, nothing cleaned up) and the runtime comes back first. A mesh
// pod whose sandbox the kubelet recreates before meshlet is back gets no
// app container; once meshlet is back it is enrolled late, its container
// starts, and none of the dead pods is handed to ztunnel, kept in the
// checkpoint or held open.
func TestNodeReboot(t *testing.T) {
	m := startMesh(t, "--standalone", "--cri-resync-interval=1s")
	var dead []*pod
	for i := range 4 {
		labels := map[string]string(nil)
		if i%2 == 0 {
			labels = ambient
		}
		p := runPod(t, "app", labels, false)
		if _, err := theEnv(t).StartContainer(p.id, p.spec, "app"); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, p)
	}
	m.zt.Stop()
	if err := m.meshlet.Kill(); err != nil {
		t.Fatal(err)
	}
	m.meshlet = nil
	if err := theEnv(t).Reboot(); err != nil {
		t.Fatal(err)
	}

	again := runPod(t, "app", ambient, false)
	if _, err := theEnv(t).StartContainer(again.id, again.spec, "app"); err == nil || !strings.Contains(err.Error(), meshletRequired) {
		t.Fatalf("app container of a mesh pod after the reboot, meshlet not back: %v, want a refusal naming the required plugin", err)
	}
	m.startMeshlet()
	m.connectZtunnel()
	if err := m.meshlet.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	took := m.waitInvariant(t, 15*time.Second, []*pod{again}, nil)
	if _, err := theEnv(t).StartContainer(again.id, again.spec, "app"); err != nil {
		t.Fatalf("app container once meshlet is back: %v", err)
	}
	for _, r := range m.zt.Requests() {
		for _, p := range dead {
			if r.UID == p.spec.UID {
				t.Fatalf("a pod that died in the reboot reached ztunnel: %v", r)
			}
		}
	}
	if late := m.metric("meshlet_late_enrollments_total"); late != 1 {
		t.Fatalf("meshlet_late_enrollments_total %v, want 1 (the pod recreated before meshlet was back)", late)
	}
	t.Logf("after the reboot the invariant held %v after meshlet was ready", took.Round(time.Millisecond))
}
