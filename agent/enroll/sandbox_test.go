package enroll

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestReplacedSandboxEventsLeaveTheNewOne: the kubelet re-creates a pod's
// sandbox (same UID, new sandbox and netns) and stops and removes the old
// one later. The new sandbox's start releases the old enrollment; the old
// sandbox's stop and removal then change nothing: the proxy's last word is
// the Add of the new netns, its rules stay, the status stays enabled. The
// new sandbox's own stop releases it.
func TestReplacedSandboxEventsLeaveTheNewOne(t *testing.T) {
	h := newHarness(t)
	old, cur := h.sandbox("p", "sb-0", 1, meshOn), h.sandbox("p", "sb-1", 2, meshOn)
	if _, err := h.core.Enroll(ctx, old); err != nil {
		t.Fatal(err)
	}
	h.rec.take()
	if res, err := h.core.Enroll(ctx, cur); err != nil || !res.Enrolled {
		t.Fatalf("Enroll(new sandbox) = %+v, %v", res, err)
	}
	want := []string{"del p", "remove p inode=1 scope=host", "apply p inode=2 dns=true", "add p inode=2 sa=sa-name-p"}
	if got := h.rec.take(); !slices.Equal(got, want) {
		t.Fatalf("new sandbox: calls %q, want %q", got, want)
	}
	if err := h.core.Release(ctx, "p", "sb-0"); err != nil {
		t.Fatal(err)
	}
	if err := h.core.Forget(ctx, "p", "sb-0"); err != nil {
		t.Fatal(err)
	}
	if got := h.rec.take(); len(got) != 0 {
		t.Fatalf("the old sandbox's stop and removal made calls %q, want none", got)
	}
	rec, ok := h.core.Record("p")
	if !ok || rec.SandboxID != "sb-1" || rec.NetnsInode != 2 || rec.NetnsCookie != 1<<32+2 {
		t.Fatalf("record after the old sandbox went: %+v, %t; want sandbox sb-1, inode 2 and its cookie", rec, ok)
	}
	if st := h.status.of("p"); st[len(st)-1] != RedirectionEnabled {
		t.Fatalf("status reports %v, want enabled last", st)
	}
	if !h.redir.has("p") {
		t.Fatal("the pod's rules were removed")
	}
	if err := h.core.Release(ctx, "p", "sb-1"); err != nil {
		t.Fatal(err)
	}
	if got, want := h.rec.take(), []string{"del p", "remove p inode=2 scope=host"}; !slices.Equal(got, want) {
		t.Fatalf("the current sandbox's stop: calls %q, want %q", got, want)
	}
}

// TestReconcileKeepsTheCurrentSandbox: a listing with a pod's old and new
// sandbox, in either order, leaves the pod as it is in the new one.
func TestReconcileKeepsTheCurrentSandbox(t *testing.T) {
	for _, order := range []string{"old first", "new first"} {
		t.Run(order, func(t *testing.T) {
			h := newHarness(t)
			old, cur := h.sandbox("p", "sb-0", 1, meshOn), h.sandbox("p", "sb-1", 2, meshOn)
			if _, err := h.core.Enroll(ctx, cur); err != nil {
				t.Fatal(err)
			}
			h.rec.take()
			listing := []Pod{old, cur}
			if order == "new first" {
				listing = []Pod{cur, old}
			}
			if _, err := h.core.Reconcile(ctx, listing); err != nil {
				t.Fatal(err)
			}
			if got := h.rec.take(); len(got) != 0 {
				t.Fatalf("calls %q, want none", got)
			}
			if st, _ := h.core.Status("p"); st.SandboxID != "sb-1" || st.State != StateEnrolled {
				t.Fatalf("status %+v, want enrolled in sb-1", st)
			}
		})
	}
}

// TestCheckpointNamesTheCurrentSandbox: right after a restart the core
// knows a pod only by the previous agent's record: that record's sandbox
// is the one the core holds the pod in (not the other one listed beside
// it, whichever comes last), until the first Reconcile claims it. Until
// then the record is in no view the container gate reads.
func TestCheckpointNamesTheCurrentSandbox(t *testing.T) {
	for _, order := range []string{"recorded first", "recorded last"} {
		t.Run(order, func(t *testing.T) {
			h0 := newHarness(t)
			recorded, other := h0.sandbox("p", "sb-1", 1, meshOn), h0.sandbox("p", "sb-2", 2, meshOn)
			if _, err := h0.core.Enroll(ctx, recorded); err != nil {
				t.Fatal(err)
			}
			rec, _ := h0.core.Record("p")
			h := newHarness(t, rec)
			h.opener.set(recorded.NetnsPath, 1)
			h.opener.set(other.NetnsPath, 2)
			if got := h.core.CurrentSandbox("p"); got != "sb-1" {
				t.Fatalf("CurrentSandbox = %q, want the record's sb-1", got)
			}
			// The container gate's view has no record before the runtime
			// has listed the pod: a recycled inode never lets a container
			// start in a namespace nobody programmed.
			if _, ok := h.core.Record("p"); ok {
				t.Fatal("Record(p) before Reconcile: the gate would trust the previous agent's record")
			}
			if _, ok := h.core.RecordInNetns(1); ok {
				t.Fatal("RecordInNetns(1) before Reconcile: the gate would trust the previous agent's record")
			}
			for sb, want := range map[string]bool{"sb-1": true, "": true, "sb-2": false} {
				if got := h.core.Holds("p", sb); got != want {
					t.Errorf("Holds(p, %q) = %v, want %v", sb, got, want)
				}
			}
			listing := []Pod{recorded, other}
			if order == "recorded last" {
				listing = []Pod{other, recorded}
			}
			if _, err := h.core.Reconcile(ctx, listing); err != nil {
				t.Fatal(err)
			}
			if st, _ := h.core.Status("p"); st.SandboxID != "sb-1" || st.State != StateEnrolled {
				t.Fatalf("status %+v, want enrolled in the recorded sb-1", st)
			}
			if h.core.Holds("p", "sb-2") || !h.core.Holds("p", "sb-1") {
				t.Fatal("after Reconcile the core holds the pod in another sandbox than sb-1")
			}
		})
	}
}

// TestFailedNewSandboxIsNotEnrolled: when a pod's new sandbox cannot be
// enrolled, the answer is about that sandbox (not enrolled, so the gate
// refuses its containers), and the old sandbox's enrollment is gone with
// it, its status removed.
func TestFailedNewSandboxIsNotEnrolled(t *testing.T) {
	h := newHarness(t)
	if _, err := h.core.Enroll(ctx, h.sandbox("p", "sb-0", 1, meshOn)); err != nil {
		t.Fatal(err)
	}
	cur := h.sandbox("p", "sb-1", 2, meshOn)
	h.opener.withoutIPs[cur.NetnsPath] = true
	res, err := h.core.Enroll(ctx, cur)
	if err == nil || res.Enrolled {
		t.Fatalf("Enroll(new sandbox without its IPs) = %+v, %v; want a failure, not enrolled", res, err)
	}
	if h.proxy.uids()["p"] {
		t.Fatal("the proxy still has the old sandbox")
	}
	if st := h.status.of("p"); st[len(st)-1] != RedirectionRemoved {
		t.Fatalf("status reports %v, want removed last", st)
	}

	// A new sandbox the proxy refuses: its rules went in (pending), were
	// rolled back (removed), and removed is said once.
	if _, err := h.core.Enroll(ctx, h.sandbox("p", "sb-2", 3, meshOn)); err != nil {
		t.Fatal(err)
	}
	h.proxy.failAdd = errors.New("refused")
	before := len(h.status.of("p"))
	if res, err := h.core.Enroll(ctx, h.sandbox("p", "sb-3", 4, meshOn)); err == nil || res.Enrolled {
		t.Fatalf("Enroll(new sandbox the proxy refuses) = %+v, %v; want a failure, not enrolled", res, err)
	}
	if st := h.status.of("p")[before:]; !slices.Equal(st, []RedirectionStatus{RedirectionPending, RedirectionRemoved}) {
		t.Fatalf("status reports %v after the refused sandbox, want [pending removed]", st)
	}
}

// FuzzSandboxEvents: events for the sandboxes of one pod, with inodes the
// kernel recycles among them (inodeOf), drawn by the fuzzer. Whatever the order, an
// event for a sandbox other than the pod's current one (the last started)
// changes nothing, and an enrolled pod's record names the current sandbox.
func FuzzSandboxEvents(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x01, 0x10, 0x20, 0x31})
	f.Add([]byte{0x00, 0x01, 0x21, 0x30, 0x22, 0x13})
	f.Add([]byte{0x03, 0x02, 0x41, 0x40, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			return
		}
		h := newHarness(t)
		current, forgot := "", false
		for i, op := range ops {
			sb := fmt.Sprintf("sb-%d", op&0x3)
			pod := h.sandbox("p", sb, inodeOf(sb), meshOn)
			before, hadRecord := h.core.Record("p")
			stBefore, _ := h.core.Status("p")
			h.rec.take()
			switch kind := op >> 4 & 0x3; kind {
			case 0:
				current = sb
				res, err := h.core.Enroll(ctx, pod)
				if err != nil || !res.Enrolled {
					t.Fatalf("op %d: Enroll(%s) = %+v, %v", i, sb, res, err)
				}
			case 1:
				_ = h.core.Release(ctx, "p", sb)
			case 2:
				_ = h.core.Forget(ctx, "p", sb)
				forgot = sb == current
			case 3:
				// The current sandbox listed with another, in either
				// order; or, before any, this one alone.
				listing := []Pod{pod}
				if current == "" {
					current = sb
				} else if op&0x80 == 0 {
					listing = append(listing, h.sandbox("p", current, inodeOf(current), meshOn))
				} else {
					listing = append([]Pod{h.sandbox("p", current, inodeOf(current), meshOn)}, listing...)
				}
				if _, err := h.core.Reconcile(ctx, listing); err != nil {
					t.Fatalf("op %d: Reconcile: %v", i, err)
				}
			}
			if kind := op >> 4 & 0x3; (kind == 1 || kind == 2) && sb != current && current != "" {
				after, hasRecord := h.core.Record("p")
				stAfter, _ := h.core.Status("p")
				if calls := h.rec.take(); len(calls) != 0 || hasRecord != hadRecord || !sameRecord(after, before) || stAfter != stBefore {
					t.Fatalf("op %d: an event for %s (current %s) changed the pod: calls %q, record %+v → %+v", i, sb, current, calls, before, after)
				}
			}
			if rec, ok := h.core.Record("p"); ok && rec.SandboxID != current {
				t.Fatalf("op %d: record names sandbox %s, current is %s", i, rec.SandboxID, current)
			}
			if forgot {
				current, forgot = "", false // the core knows no sandbox of the pod now
			}
		}
	})
}

// inodeOf is the namespace inode of sandbox sb-<n>: two for four
// sandboxes, as the kernel recycles a freed namespace's inode for the next
// (sb-0 and sb-2 share one, sb-1 and sb-3 the other). A sandbox keeps its
// namespace, and so its inode, for its life.
func inodeOf(sb string) uint64 { return uint64(1 + (sb[len(sb)-1]-'0')&0x1) }

func sameRecord(a, b Record) bool {
	return a.sameEnrollment(&b) && a.SandboxID == b.SandboxID && a.NetnsCookie == b.NetnsCookie && a.Redirection == b.Redirection
}

// TestReconcileReportsLateEnrollments: of the pods a listing enrolls, late
// are those no agent held in their sandbox before: not one this agent
// enrolled, not one the previous agent's record names in that sandbox
// (adopted), but a new pod and one recorded in another sandbox; a pod
// listed in two sandboxes once, in the one Reconcile keeps.
func TestReconcileReportsLateEnrollments(t *testing.T) {
	h0 := newHarness(t)
	if _, err := h0.core.Enroll(ctx, h0.sandbox("adopted", "sb-a", 1, meshOn)); err != nil {
		t.Fatal(err)
	}
	if _, err := h0.core.Enroll(ctx, h0.sandbox("replaced", "sb-r0", 2, meshOn)); err != nil {
		t.Fatal(err)
	}
	adopted, _ := h0.core.Record("adopted")
	replaced, _ := h0.core.Record("replaced")
	h := newHarness(t, adopted, replaced)
	known := h.sandbox("known", "sb-k", 3, meshOn)
	if _, err := h.core.Enroll(ctx, known); err != nil {
		t.Fatal(err)
	}
	listing := []Pod{known, h.sandbox("adopted", "sb-a", 1, meshOn), h.sandbox("replaced", "sb-r1", 4, meshOn),
		h.sandbox("new", "sb-n", 5, meshOn), h.sandbox("plain", "sb-p", 6, nil),
		// Listed twice: counted once, in the sandbox kept.
		h.sandbox("twice", "sb-t0", 7, meshOn), h.sandbox("twice", "sb-t1", 8, meshOn)}
	late, err := h.core.Reconcile(ctx, listing)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range late {
		got = append(got, p.UID+"/"+p.SandboxID)
	}
	slices.Sort(got)
	if want := []string{"new/sb-n", "replaced/sb-r1", "twice/sb-t1"}; !slices.Equal(got, want) {
		t.Fatalf("late %v, want %v", got, want)
	}
}
