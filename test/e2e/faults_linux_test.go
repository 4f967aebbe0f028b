package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/meshlet/meshlet/test/e2e/env"
)

// TestKillDuringChurn: meshlet is killed (SIGKILL: no shutdown step runs)
// at random moments, some inside a runtime hook, while mesh and plain pods
// are created and removed; it is started again after a few pods have been
// created without it. Throughout, an app container that the runtime starts
// in a mesh pod finds the pod's redirection in place; after the last
// restart the invariant holds for every pod still running, within a bound.
// The seed is logged: a failure replays with MESHLET_FAULT_SEED.
func TestKillDuringChurn(t *testing.T) {
	seed := faultSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	m := startMesh(t)
	live := map[string]*pod{} // by sandbox id
	mustMesh := map[string]bool{}
	const pods = 60
	kills, refusedSandboxes, refusedApps := 0, 0, 0
	down := false
	restart := func() {
		m.zt.Stop()
		m.startMeshlet()
		m.connectZtunnel()
		if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
			t.Fatal(err)
		}
		down = false
	}
	for i := range pods {
		// meshlet comes back after three pods without it.
		if down && i%12 == 8 {
			restart()
		}
		mesh := i%2 == 0
		labels := map[string]string(nil)
		if mesh {
			labels = ambient
		}
		// Every 12th pod, meshlet dies while the runtime is (likely)
		// inside its hook for that pod.
		killed := make(chan struct{})
		if i%12 == 5 && !down {
			delay := time.Duration(rng.IntN(4000)) * time.Microsecond
			go func() {
				defer close(killed)
				time.Sleep(delay)
				_ = m.meshlet.Kill()
			}()
			kills++
			down = true
		} else {
			close(killed)
		}
		p := &pod{spec: env.PodSpec{Name: fmt.Sprintf("churn-%d", i), Namespace: "app",
			UID: fmt.Sprintf("churn-%d-%d", seed, i), Labels: labels}}
		id, err := theEnv(t).RunPod(p.spec)
		<-killed
		if err != nil {
			// A mesh pod meshlet could not enroll: the runtime refused
			// its sandbox and the kubelet would retry.
			refusedSandboxes++
			continue
		}
		p.id = id
		t.Cleanup(func() { _ = theEnv(t).RemovePod(id) })
		if p.info, err = theEnv(t).InspectPod(id); err != nil {
			t.Fatal(err)
		}
		live[id] = p
		mustMesh[id] = mesh
		// The app container: if the runtime starts it in a mesh pod,
		// the pod's redirection must be in place already.
		if _, err := theEnv(t).StartContainer(id, p.spec, "app"); err != nil {
			refusedApps++
		} else if mesh && !hasTable(p.info.NetnsPath) {
			t.Errorf("pod %s: the app container started with no redirection in the pod (meshlet down: %t)", p.spec.Name, down)
		}
		// Some pods go: the oldest of each kind now and then.
		if i%5 == 4 {
			for gone := range live {
				if rng.IntN(2) == 0 {
					continue
				}
				if err := theEnv(t).StopPod(gone); err != nil {
					t.Fatal(err)
				}
				if err := theEnv(t).RemovePod(gone); err != nil {
					t.Fatal(err)
				}
				delete(live, gone)
				delete(mustMesh, gone)
				break
			}
		}
	}
	if down {
		restart()
	}
	var meshed, plain []*pod
	for id, p := range live {
		if mustMesh[id] {
			meshed = append(meshed, p)
		} else {
			plain = append(plain, p)
		}
	}
	took := m.waitInvariant(t, 15*time.Second, meshed, plain)
	t.Logf("seed %d: %d pods, %d kills, %d sandboxes and %d app containers refused; %d mesh and %d plain pods running; invariant held %v after the last restart",
		seed, pods, kills, refusedSandboxes, refusedApps, len(meshed), len(plain), took.Round(time.Millisecond))
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
