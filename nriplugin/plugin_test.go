package nriplugin

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/meshlet/meshlet/agent/enroll"
)

// fakeCore records calls; the real core is tested in agent/enroll and, with
// this plugin against a real containerd, in test/e2e.
type fakeCore struct {
	mu           sync.Mutex
	enrollErr    error
	status       map[string]enroll.PodStatus
	checkpointed map[string]string // UID → the sandbox of the previous meshlet's record
	enrolled     []enroll.Pod
	deadline     time.Duration
	released     []string
}

func (f *fakeCore) Enroll(ctx context.Context, pod enroll.Pod) (enroll.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := ctx.Deadline(); ok {
		f.deadline = time.Until(d)
	}
	f.enrolled = append(f.enrolled, pod)
	if f.enrollErr != nil {
		return enroll.Result{}, f.enrollErr
	}
	f.status[pod.UID] = enroll.PodStatus{UID: pod.UID, SandboxID: pod.SandboxID, State: enroll.StateEnrolled}
	return enroll.Result{Enrolled: true, Changed: true}, nil
}
func (f *fakeCore) Release(_ context.Context, uid, _ string) error {
	f.released = append(f.released, uid)
	return errors.New("ztunnel unreachable")
}
func (f *fakeCore) Forget(context.Context, string, string) error { return nil }
func (f *fakeCore) Reconcile(ctx context.Context, pods []enroll.Pod) ([]enroll.Pod, error) {
	var late []enroll.Pod
	for _, p := range pods {
		held := f.Holds(p.UID, p.SandboxID)
		if _, err := f.Enroll(ctx, p); err != nil {
			return late, err
		}
		if !held {
			late = append(late, p)
		}
	}
	return late, nil
}

// Holds is the core's rule (enroll's TestReconcileReportsLateEnrollments).
func (f *fakeCore) Holds(uid, sandboxID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.status[uid]; ok && st.State == enroll.StateEnrolled && enroll.SameSandbox(st.SandboxID, sandboxID) {
		return true
	}
	cp, ok := f.checkpointed[uid]
	return ok && enroll.SameSandbox(cp, sandboxID)
}

func (f *fakeCore) CurrentSandbox(uid string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.status[uid]; st.SandboxID != "" {
		return st.SandboxID
	}
	return f.checkpointed[uid]
}

func (f *fakeCore) Status(uid string) (enroll.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.status[uid]
	return s, ok
}

type fakeMetrics struct {
	enrolled, failed, late int
	connected              bool
}

func (m *fakeMetrics) Enrolled(_ enroll.PodRef, _ time.Duration, err error) {
	if err != nil {
		m.failed++
	} else {
		m.enrolled++
	}
}
func (m *fakeMetrics) LateEnrolled(n int) { m.late += n }
func (m *fakeMetrics) Connected(c bool)   { m.connected = c }

func sandbox(uid, netns string, ips ...string) *api.PodSandbox {
	sb := &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: "pod-" + uid, Namespace: "ns",
		Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}, RuntimeHandler: "runc", Ips: ips,
		Linux: &api.LinuxPodSandbox{}, Pid: 4242}
	if netns != "" {
		sb.Linux.Namespaces = []*api.LinuxNamespace{{Type: "ipc"}, {Type: "network", Path: netns}}
	}
	return sb
}

func newPlugin() (*Plugin, *fakeCore, *fakeMetrics) {
	core := &fakeCore{status: map[string]enroll.PodStatus{}}
	m := &fakeMetrics{}
	return New(DefaultConfig(), core, m), core, m
}

func TestPodFromSandbox(t *testing.T) {
	pod, bad := podFromSandbox(sandbox("u", "/var/run/netns/x", "10.0.0.5", "::ffff:10.0.0.6", "fd00::5", "bogus"))
	if pod.UID != "u" || pod.Name != "pod-u" || pod.Namespace != "ns" || pod.NetnsPath != "/var/run/netns/x" ||
		pod.HostNetwork || pod.RuntimeHandler != "runc" || pod.Labels["istio.io/dataplane-mode"] != "ambient" {
		t.Fatalf("pod %+v", pod)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6"), netip.MustParseAddr("fd00::5")}
	if len(pod.IPs) != 3 || pod.IPs[0] != want[0] || pod.IPs[1] != want[1] || pod.IPs[2] != want[2] {
		t.Fatalf("IPs %v, want %v", pod.IPs, want)
	}
	if len(bad) != 1 || bad[0] != "bogus" {
		t.Fatalf("bad IPs %v", bad)
	}
	host, _ := podFromSandbox(sandbox("h", ""))
	if !host.HostNetwork || host.NetnsPath != "" {
		t.Fatalf("sandbox without a network namespace: %+v", host)
	}
}

func TestRunPodSandbox(t *testing.T) {
	p, core, m := newPlugin()
	if err := p.RunPodSandbox(context.Background(), sandbox("u", "/netns/u", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	if core.deadline <= 0 || core.deadline > p.cfg.EnrollTimeout {
		t.Fatalf("Enroll ran with %v left, want a deadline within --enroll-timeout %v", core.deadline, p.cfg.EnrollTimeout)
	}
	if m.enrolled != 1 {
		t.Fatalf("enrollment not recorded")
	}
	core.enrollErr = &enroll.Error{UID: "v", Step: enroll.StepProxy, Err: errors.New("no ztunnel connected")}
	err := p.RunPodSandbox(context.Background(), sandbox("v", "/netns/v", "10.0.0.6"))
	if err == nil || !strings.Contains(err.Error(), "ns/pod-v") || !strings.Contains(err.Error(), "no ztunnel connected") {
		t.Fatalf("RunPodSandbox with a failing core = %v, want an error naming the pod and the cause", err)
	}
	if m.failed != 1 {
		t.Fatalf("failure not recorded")
	}
	if err := p.RunPodSandbox(context.Background(), sandbox("w", "/netns/w", "not-an-ip")); err == nil {
		t.Fatal("RunPodSandbox accepted an unparsable IP")
	}
}

func TestStopNeverFails(t *testing.T) {
	p, core, _ := newPlugin()
	if err := p.StopPodSandbox(context.Background(), sandbox("u", "")); err != nil {
		t.Fatalf("StopPodSandbox = %v: a stop must never be held up by the mesh", err)
	}
	if len(core.released) != 1 || core.released[0] != "u" {
		t.Fatalf("released %v", core.released)
	}
}

func TestCreateContainerGate(t *testing.T) {
	p, core, _ := newPlugin()
	if _, _, err := p.CreateContainer(context.Background(), sandbox("u", "/netns/u", "10.0.0.5"), &api.Container{Name: "app"}); err != nil {
		t.Fatalf("gate refused an enrollable pod: %v", err)
	}
	core.enrollErr = errors.New("redirect failed")
	_, _, err := p.CreateContainer(context.Background(), sandbox("v", "/netns/v", "10.0.0.6"), &api.Container{Name: "app"})
	if !errors.Is(err, ErrNotMeshed) || !strings.Contains(err.Error(), `"app"`) {
		t.Fatalf("gate for an unenrollable mesh pod = %v, want ErrNotMeshed naming the container", err)
	}
}

func TestSynchronizeCountsLateEnrollments(t *testing.T) {
	p, core, m := newPlugin()
	after := 0
	p.cfg.AfterSynchronize = func(context.Context) { after++ }
	core.status["known"] = enroll.PodStatus{UID: "known", SandboxID: "sb-known", State: enroll.StateEnrolled}
	core.status["recreated"] = enroll.PodStatus{UID: "recreated", SandboxID: "sb-before", State: enroll.StateEnrolled}
	// Enrolled by the previous meshlet: adopted, not late; unless the
	// sandbox it enrolled is not the one that runs now.
	core.checkpointed = map[string]string{"adopted": "sb-adopted", "replaced": "sb-before"}
	_, err := p.Synchronize(context.Background(), []*api.PodSandbox{
		sandbox("known", "/netns/k", "10.0.0.1"), sandbox("late", "/netns/l", "10.0.0.2"), sandbox("adopted", "/netns/a", "10.0.0.3"),
		sandbox("replaced", "/netns/r", "10.0.0.4"), sandbox("recreated", "/netns/c", "10.0.0.5"),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.late != 3 || !m.connected || !p.Connected() {
		t.Fatalf("late %d connected %t/%t, want 3 late (late, replaced, recreated) and connected", m.late, m.connected, p.Connected())
	}
	if after != 1 {
		t.Fatalf("AfterSynchronize ran %d times, want once", after)
	}
}

func TestRunReconnectsUntilCancelled(t *testing.T) {
	p, _, m := newPlugin()
	p.cfg.SocketPath = t.TempDir() + "/missing.sock"
	p.cfg.MinBackoff, p.cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if p.Connected() || m.connected {
		t.Fatal("connected without a runtime")
	}
}
