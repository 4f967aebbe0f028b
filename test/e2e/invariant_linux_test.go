package e2e

import (
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/test/env"
)

// invariant is meshlet's promise on a node, checked once: every running
// pod that must be meshed has meshlet's table in its netns, exactly one
// live entry at ztunnel (the stand-in's current connection: Adds less
// Dels) with its netns inode, its address in the node's probe SNAT set,
// a descriptor of its netns held by meshlet, and a checkpoint entry; no
// other pod has any of these; meshlet holds no descriptor of a namespace
// that is not a mesh pod's (the node's own aside). It returns every
// breach, or nil.
func (m *mesh) invariant(t testing.TB, meshed, plain []*pod) error {
	t.Helper()
	var breaches []string
	breach := func(format string, args ...any) { breaches = append(breaches, fmt.Sprintf(format, args...)) }

	live := map[string]uint64{} // the latest Add's inode, of pods not deleted since
	adds := map[string]int{}    // Adds taken since the pod's last Del
	if m.zt != nil {
		for _, r := range m.zt.Requests() {
			switch {
			case r.Refused != "":
				// Refused: no entry; meshlet sends it again.
			case r.Kind == zdstest.Add:
				live[r.UID] = r.NetnsInode
				adds[r.UID]++
			case r.Kind == zdstest.Del:
				delete(live, r.UID)
				delete(adds, r.UID)
			}
		}
	}
	snat, err := theEnv(t).Exec("nft", "list", "set", "inet", "meshlet", "probe-pods-v4")
	if err != nil {
		return fmt.Errorf("the node's probe SNAT set: %v: %s", err, snat)
	}
	held, err := m.meshlet.HeldNetns()
	if err != nil {
		return err
	}
	cp, err := state.Load(theEnv(t).MeshletStateDir())
	if err != nil {
		return err
	}
	checkpointed := map[string]uint64{}
	for _, r := range cp.Pods {
		checkpointed[r.UID] = r.NetnsInode
	}

	want := map[string]bool{}
	podInodes := map[uint64]bool{}
	for _, p := range meshed {
		uid := p.spec.UID
		want[uid] = true
		ino, err := netnsInode(p)
		if err != nil {
			return err
		}
		podInodes[ino] = true
		if !hasTable(p.info.NetnsPath) {
			breach("mesh pod %s: no meshlet table in its netns", p.spec.Name)
		}
		if got, ok := live[uid]; !ok || got != ino || adds[uid] != 1 {
			breach("mesh pod %s: ztunnel's live entry %d from %d Adds (present %t), want one with netns inode %d", p.spec.Name, got, adds[uid], ok, ino)
		}
		if !strings.Contains(snat, p.info.IP+",") && !strings.Contains(snat, p.info.IP+" ") {
			breach("mesh pod %s: %s not in the node's probe SNAT set", p.spec.Name, p.info.IP)
		}
		if held[ino] == 0 {
			breach("mesh pod %s: meshlet holds no descriptor of its netns", p.spec.Name)
		}
		if got, ok := checkpointed[uid]; !ok || got != ino {
			breach("mesh pod %s: checkpoint entry inode %d (present %t), want %d", p.spec.Name, got, ok, ino)
		}
	}
	for _, p := range plain {
		uid := p.spec.UID
		ino, err := netnsInode(p)
		if err != nil {
			return err
		}
		podInodes[ino] = true
		if hasTable(p.info.NetnsPath) {
			breach("plain pod %s: has a meshlet table", p.spec.Name)
		}
		if _, ok := live[uid]; ok {
			breach("plain pod %s: live at ztunnel", p.spec.Name)
		}
		if strings.Contains(snat, p.info.IP+",") || strings.Contains(snat, p.info.IP+" ") {
			breach("plain pod %s: %s in the node's probe SNAT set", p.spec.Name, p.info.IP)
		}
		if held[ino] != 0 {
			breach("plain pod %s: meshlet holds %d descriptors of its netns", p.spec.Name, held[ino])
		}
		if _, ok := checkpointed[uid]; ok {
			breach("plain pod %s: in the checkpoint", p.spec.Name)
		}
	}
	for uid := range live {
		if !want[uid] {
			breach("ztunnel has a live entry for %s, which is no running mesh pod", uid)
		}
	}
	for uid := range checkpointed {
		if !want[uid] {
			breach("the checkpoint holds %s, which is no running mesh pod", uid)
		}
	}
	node, err := netnsInodeOf(theEnv(t).NetnsPath())
	if err != nil {
		return err
	}
	for ino, n := range held {
		if ino != node && !podInodes[ino] {
			breach("meshlet holds %d descriptors of netns %d, which is no running pod's", n, ino)
		}
	}
	if len(breaches) == 0 {
		return nil
	}
	sort.Strings(breaches)
	return errors.New(strings.Join(breaches, "\n"))
}

// waitInvariant polls the invariant until it holds and returns how long
// that took (0: at the first check), failing after bound with what still
// does not.
func (m *mesh) waitInvariant(t testing.TB, bound time.Duration, meshed, plain []*pod) time.Duration {
	t.Helper()
	start := time.Now()
	var err, first error
	for time.Since(start) < bound {
		// The time to the check that passes, not through it: one check
		// runs nft in every pod (about 20 ms each).
		at := time.Since(start)
		if err = m.invariant(t, meshed, plain); err == nil {
			if first != nil {
				t.Logf("the invariant held after %v; at first:\n%v", at.Round(time.Millisecond), first)
			}
			return at
		}
		if first == nil {
			first = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the invariant does not hold %v after the fault:\n%v", bound, err)
	return 0
}

func hasTable(netnsPath string) bool {
	return exec.Command("nsenter", "--net="+netnsPath, "nft", "list", "table", "inet", "meshlet").Run() == nil
}

func netnsInode(p *pod) (uint64, error) { return netnsInodeOf(p.info.NetnsPath) }

func netnsInodeOf(path string) (uint64, error) {
	ino, err := env.Inode(path)
	if err != nil {
		return 0, fmt.Errorf("netns %s: %w", path, err)
	}
	return ino, nil
}
