package nriplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/meshlet/meshlet/agent/enroll"
)

// TestSynchronizeEnrollsTheSandboxThatRuns: a listing with a pod's old
// and new sandbox, as containerd and CRI-O give them, in both orders:
// only the sandbox that runs reaches the core; a pod whose only sandbox
// is stopped is not listed (the core forgets it).
func TestSynchronizeEnrollsTheSandboxThatRuns(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "netns-live")
	if err := os.WriteFile(exists, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(dir, "netns-gone")
	sb := func(id string, pid uint32, netns string) *api.PodSandbox {
		s := sandbox("p", netns, "10.0.0.1")
		s.Id, s.Pid = id, pid
		return s
	}
	for _, c := range []struct {
		name     string
		old, new *api.PodSandbox
		current  string // the core's sandbox of the pod
		want     string // the sandbox enrolled; "" none
	}{
		// containerd drops a torn-down namespace from the listing.
		{name: "containerd, old torn down", old: sb("old", 0, ""), new: sb("new", 10, exists), want: "new"},
		// The pause process killed: the kubelet has not stopped the old
		// sandbox yet, its namespace is still there.
		{name: "containerd, old pause gone", old: sb("old", 0, exists), new: sb("new", 10, exists), want: "new"},
		{name: "containerd, old pause gone, core in it", old: sb("old", 0, exists), new: sb("new", 10, exists), current: "old", want: "new"},
		// CRI-O without a pause process: pid 0 for both; the old
		// namespace unmounted.
		{name: "CRI-O, old torn down", old: sb("old", 0, gone), new: sb("new", 0, exists), want: "new"},
		{name: "CRI-O, both namespaces there, core in the new", old: sb("old", 0, exists), new: sb("new", 0, exists), current: "new", want: "new"},
		{name: "only a stopped sandbox", old: sb("old", 0, gone), want: ""},
	} {
		orders := [][]*api.PodSandbox{{c.old, c.new}, {c.new, c.old}}
		if c.new == nil {
			orders = [][]*api.PodSandbox{{c.old}}
		}
		for i, listing := range orders {
			p, core, _ := newPlugin()
			if c.current != "" {
				core.status["p"] = enroll.PodStatus{UID: "p", SandboxID: c.current, State: enroll.StateEnrolled}
			}
			if _, err := p.Synchronize(context.Background(), listing, nil); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, pod := range core.enrolled {
				got = append(got, pod.SandboxID)
			}
			want := []string{c.want}
			if c.want == "" {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, order %d: enrolled sandboxes %q, want %q", c.name, i, got, want)
			}
		}
	}
}

// TestHostNetworkSandboxRuns: a host-network pod's sandbox names no
// network namespace; its pause process says it runs.
func TestHostNetworkSandboxRuns(t *testing.T) {
	p, core, _ := newPlugin()
	if _, err := p.Synchronize(context.Background(), []*api.PodSandbox{sandbox("h", "")}, nil); err != nil {
		t.Fatal(err)
	}
	if len(core.enrolled) != 1 || !core.enrolled[0].HostNetwork {
		t.Fatalf("enrolled %+v, want the host-network pod", core.enrolled)
	}
}

// FuzzRunningSandboxes: listings of up to eight sandboxes of three pods,
// each with or without a pause process and a namespace, drawn by the
// fuzzer. The sandboxes kept are the listing's own, one per pod; none is
// stopped; every pod with a sandbox that is not stopped keeps one, with a
// pause process if any of its sandboxes has one.
func FuzzRunningSandboxes(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x22, 0x13}, byte(1))
	f.Add([]byte{0x07, 0x07, 0x17, 0x27, 0x05}, byte(0))
	f.Fuzz(func(t *testing.T, raw []byte, current byte) {
		if len(raw) > 8 {
			raw = raw[:8]
		}
		exists := filepath.Join(t.TempDir(), "netns")
		if err := os.WriteFile(exists, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var listing []*api.PodSandbox
		for i, b := range raw {
			uid := fmt.Sprint("p", b%3)
			netns := []string{"", exists, exists + "-gone"}[(b>>2)%3]
			s := sandbox(uid, netns, "10.0.0.1")
			s.Id = fmt.Sprint("sb", i)
			if b&0x10 == 0 {
				s.Pid = 0
			}
			listing = append(listing, s)
		}
		kept := runningSandboxes(context.Background(), slices.Clone(listing), func(string) string { return fmt.Sprint("sb", current%8) })
		seen := map[string]bool{}
		for _, s := range kept {
			if seen[s.GetUid()] || !slices.Contains(listing, s) || stopped(s) {
				t.Fatalf("kept %v of %v: a pod twice, a sandbox not listed, or a stopped one", kept, listing)
			}
			seen[s.GetUid()] = true
		}
		for _, s := range listing {
			if stopped(s) {
				continue
			}
			if !seen[s.GetUid()] {
				t.Fatalf("pod %s has a sandbox that runs (%s) and none was kept", s.GetUid(), s.GetId())
			}
			if s.GetPid() != 0 {
				for _, k := range kept {
					if k.GetUid() == s.GetUid() && k.GetPid() == 0 {
						t.Fatalf("pod %s: kept %s without a pause process over %s with one", s.GetUid(), k.GetId(), s.GetId())
					}
				}
			}
		}
	})
}
