package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/state"
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
	socket := filepath.Join(t.TempDir(), "zt.sock")
	m := &mesh{t: t, env: e, socket: socket, flags: []string{"--standalone"}}
	m.startMeshlet()
	t.Cleanup(func() {
		if m.meshlet != nil {
			if err := m.meshlet.Stop(); err != nil {
				t.Errorf("meshlet stop: %v", err)
			}
		}
	})
	zt := followZtunnel(t, socket)
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	var pods []*pod
	var uids []string
	for range disruptionPods {
		p := runPodIn(t, e, "app", ambient, false)
		pods = append(pods, p)
		uids = append(uids, p.spec.UID)
	}
	// check waits for the node to be whole again after an event, and
	// asserts that no running pod was disrupted.
	check := func(event string) {
		t.Helper()
		cur := zt.current()
		cur.meshlet = m.meshlet
		took := cur.waitInvariant(t, 30*time.Second, pods, nil)
		if d := zt.ztunnel().Disruptions(uids...); len(d) > 0 {
			t.Fatalf("%s disrupted %d of %d running mesh pods:\n%s", event, len(d), len(pods), strings.Join(d, "\n"))
		}
		if v := zt.ztunnel().Violations(); len(v) > 0 {
			t.Fatalf("%s: meshlet broke ztunnel's protocol: %q", event, v)
		}
		proxies := zt.ztunnel().Proxies()
		for _, p := range pods {
			if got, want := proxies[p.spec.UID], inode(t, p.info.NetnsPath); got != want {
				t.Fatalf("%s: pod %s's proxy runs in netns %d, want %d", event, p.spec.Name, got, want)
			}
		}
		t.Logf("%s: every pod enrolled after %v; no proxy drained or restarted", event, took.Round(time.Millisecond))
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

	// Removed while meshlet is away: ztunnel drains it; the rest stay.
	gone := pods[len(pods)-1]
	pods, uids = pods[:len(pods)-1], uids[:len(uids)-1]
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
	return state.Save(dir, kept)
}
