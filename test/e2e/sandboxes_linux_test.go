package e2e

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/test/env"
)

// TestReplacedSandbox: a pod's sandbox re-created as the kubelet does it,
// through the runtime's CRI: the old sandbox is stopped, a new one (same
// UID, attempt 1, a new netns) started, and the old one stopped again and
// removed by the kubelet's garbage collection while the new one runs. The
// pod stays enrolled in the new sandbox: ztunnel's last word about it is
// the Add of the new netns, with no Del after it; its rules are in the new
// netns; meshlet reports it enrolled there.
func TestReplacedSandbox(t *testing.T) { onEachRuntime(t, testReplacedSandbox) }

func testReplacedSandbox(t *testing.T, e *env.Env, _ matrixRuntime) {
	m := startMeshIn(t, e)
	old := runPodIn(t, e, "app", ambient, false)
	if _, err := e.StartContainer(old.id, old.spec, "app"); err != nil {
		t.Fatal(err)
	}
	if err := e.StopPod(old.id); err != nil {
		t.Fatal(err)
	}
	cur := recreatePod(t, e, old)
	if _, err := e.StartContainer(cur.id, cur.spec, "app-1"); err != nil {
		t.Fatalf("app container in the new sandbox: %v", err)
	}
	curInode := inode(t, cur.info.NetnsPath)
	m.waitFor("the new sandbox's Add", func([]*zdstest.Request) bool {
		adds := m.adds(cur.spec.UID)
		return len(adds) > 0 && adds[len(adds)-1].NetnsInode == curInode
	})
	// The garbage collection: stop (again) and remove the old sandbox.
	if err := e.RemovePod(old.id); err != nil {
		t.Fatal(err)
	}
	wantEnrolledIn(t, m, e, cur, curInode)
}

// recreatePod runs the pod's next sandbox: same UID, attempt+1. The test
// removes it at its end.
func recreatePod(t *testing.T, e *env.Env, old *pod) *pod {
	t.Helper()
	p := &pod{spec: old.spec}
	p.spec.Attempt++
	id, err := e.RunPod(p.spec)
	if err != nil {
		t.Fatalf("re-create pod %s: %v", p.spec.Name, err)
	}
	p.id = id
	t.Cleanup(func() { _ = e.RemovePod(id) })
	if p.info, err = e.InspectPod(id); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantEnrolledIn checks that the pod is in the mesh in sandbox p (netns
// inode ino) as ztunnel, its netns and meshlet see it: the last Add of its
// UID names the netns and no Del follows it, the rules are there, and
// meshlet's pods view has it enrolled in that sandbox.
func wantEnrolledIn(t *testing.T, m *mesh, e *env.Env, p *pod, ino uint64) {
	t.Helper()
	last := -1
	rs := m.zt.Requests()
	for i, r := range rs {
		if r.UID != p.spec.UID {
			continue
		}
		switch r.Kind {
		case zdstest.Add:
			last = i
			if r.NetnsInode != ino {
				last = -2
			}
		case zdstest.Del:
			if last >= 0 {
				t.Fatalf("ztunnel got a Del of pod %s after the Add of its current sandbox: %v", p.spec.Name, rs[i:])
			}
		}
	}
	if last < 0 {
		t.Fatalf("ztunnel's last Add of pod %s is not of its current netns (inode %d): %v", p.spec.Name, ino, m.adds(p.spec.UID))
	}
	if !hasRules(t, p.info.NetnsPath) {
		t.Fatalf("no rules in the current sandbox's netns %s", p.info.NetnsPath)
	}
	var pods struct {
		Pods []struct{ UID, Sandbox, State string }
	}
	getDebug(t, e.MeshletStateDir(), "/debug/pods", &pods)
	for _, d := range pods.Pods {
		if d.UID == p.spec.UID {
			if d.Sandbox != p.id || d.State != "enrolled" {
				t.Fatalf("meshlet has pod %s %s in sandbox %s, want enrolled in %s", p.spec.Name, d.State, d.Sandbox, p.id)
			}
			return
		}
	}
	t.Fatalf("meshlet does not know pod %s", p.spec.Name)
}

// TestSynchronizeWithReplacedSandboxes: a restarted meshlet is given, by
// the runtime's Synchronize, a stopped sandbox next to the running one of
// the same pod (containerd lists NotReady sandboxes), the stopped one
// created before the running one (pod a) or after it (pod b); and, where
// the runtime runs a pause process, an old sandbox whose pause process was
// killed while its netns is still there, next to a new one started while
// meshlet was away (pod c). Each pod ends enrolled in the sandbox that
// runs.
func TestSynchronizeWithReplacedSandboxes(t *testing.T) {
	onEachRuntime(t, testSynchronizeWithReplacedSandboxes)
}

func testSynchronizeWithReplacedSandboxes(t *testing.T, e *env.Env, _ matrixRuntime) {
	m := startMeshIn(t, e)
	a0 := runPodIn(t, e, "app", ambient, false)
	if err := e.StopPod(a0.id); err != nil {
		t.Fatal(err)
	}
	a1 := recreatePod(t, e, a0)
	b1 := runPodIn(t, e, "app", ambient, false)
	c0 := runPodIn(t, e, "app", ambient, false)
	stopMesh(t, m)

	b0 := recreatePod(t, e, b1) // the stopped sandbox, created after the running one
	if err := e.StopPod(b0.id); err != nil {
		t.Fatal(err)
	}
	var c1 *pod
	if c0.info.Pid != 0 {
		if err := syscall.Kill(c0.info.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitSandboxState(t, e, c0.id, "SANDBOX_NOTREADY")
		c1 = recreatePod(t, e, c0)
	} else {
		t.Logf("%s runs no pause process: the killed-pause case does not apply", e.Runtime())
	}

	m.startMeshlet()
	m.connectZtunnel()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	running := []*pod{a1, b1}
	if c1 != nil {
		running = append(running, c1)
	}
	for _, p := range running {
		ino := inode(t, p.info.NetnsPath)
		m.waitFor("pod "+p.spec.Name+" in its running sandbox", func([]*zdstest.Request) bool {
			adds := m.adds(p.spec.UID)
			return len(adds) > 0 && adds[len(adds)-1].NetnsInode == ino
		})
		wantEnrolledIn(t, m, e, p, ino)
	}
}

// stopMesh stops m's ztunnel stand-in and meshlet.
func stopMesh(t *testing.T, m *mesh) {
	t.Helper()
	m.zt.Stop()
	m.zt = nil
	if err := m.meshlet.Stop(); err != nil {
		t.Fatalf("meshlet stop: %v", err)
	}
	m.meshlet = nil
}

// waitSandboxState waits until the runtime reports the sandbox in state.
func waitSandboxState(t *testing.T, e *env.Env, id, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := e.InspectPod(id)
		if err == nil && info.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s not %s: %+v, %v", id, state, info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCheckpointOfAnotherBoot: meshlet restarted with a checkpoint of
// another boot (what it finds after a node reboot, where the kernel has
// handed the recorded namespaces' inodes to new ones) adopts nothing from
// it: the running pod is enrolled afresh, its rules rewritten rather than
// trusted, and ztunnel given its netns.
func TestCheckpointOfAnotherBoot(t *testing.T) {
	e := theEnv(t)
	m := startMeshIn(t, e)
	p := runPodIn(t, e, "app", ambient, false)
	before := tableHandle(t, p.info.NetnsPath)
	stopMesh(t, m)
	cp, err := state.Load(e.MeshletStateDir())
	if err != nil || len(cp.Pods) == 0 {
		t.Fatalf("checkpoint: %+v, %v", cp, err)
	}
	if err := state.Save(e.MeshletStateDir(), "a-boot-before-this-one", cp.Pods); err != nil {
		t.Fatal(err)
	}
	m.startMeshlet()
	m.connectZtunnel()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, p.info.NetnsPath)
	m.waitFor("the running pod", func([]*zdstest.Request) bool { return len(m.adds(p.spec.UID)) > 0 })
	if adds := m.adds(p.spec.UID); len(adds) != 1 || adds[0].NetnsInode != ino {
		t.Fatalf("ztunnel got %v, want one Add of the pod's netns", adds)
	}
	if after := tableHandle(t, p.info.NetnsPath); after == before {
		t.Fatalf("the pod's rules were kept as a checkpoint of another boot said (%s): want them written afresh", after)
	}
	if m.logLines("Checkpoint of another boot ignored") != 1 {
		t.Fatalf("meshlet did not say it ignored the checkpoint of another boot (log %s)", m.meshlet.LogPath)
	}
}

// tableHandle is the first line of `nft -a list table inet meshlet` in the
// netns: it carries the table's handle, which changes when the table is
// written anew.
func tableHandle(t *testing.T, netnsPath string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+netnsPath, "nft", "-a", "list", "table", "inet", "meshlet").Output()
	if err != nil {
		t.Fatalf("pod table: %v", err)
	}
	return strings.SplitN(string(out), "\n", 2)[0]
}
