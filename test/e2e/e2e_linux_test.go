package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/test/env"
)

var ambient = map[string]string{"istio.io/dataplane-mode": "ambient"}

// mesh is one meshlet daemon plus a ztunnel stand-in.
type mesh struct {
	t       testing.TB
	env     *env.Env
	socket  string
	meshlet *env.Meshlet
	zt      *zdstest.Ztunnel
	// state is the ztunnel process the stand-in's connections belong to:
	// it outlives them (meshlet restarts, reconnects) and counts every
	// proxy drained or restarted; a ztunnel restart is a new one.
	state *zdstest.State
	flags []string
	// healthAddr is the meshlet's --health-addr when flags give one of
	// their own (a second meshlet on the node); empty: the environment's.
	healthAddr string
}

func startMesh(t testing.TB, flags ...string) *mesh {
	t.Helper()
	return startMeshIn(t, theEnv(t), flags...)
}

// startMeshIn starts a mesh in an environment of the test's own.
func startMeshIn(t testing.TB, e *env.Env, flags ...string) *mesh {
	t.Helper()
	if len(flags) == 0 {
		flags = []string{"--standalone"}
	}
	m := &mesh{t: t, env: e, socket: filepath.Join(t.TempDir(), "zt.sock"), flags: flags, state: &zdstest.State{}}
	t.Cleanup(func() { m.state.Close() })
	m.start()
	return m
}

// start starts m's meshlet and connects its ztunnel stand-in; both stop
// when the test ends.
func (m *mesh) start() {
	t := m.t
	t.Helper()
	m.startMeshlet()
	t.Cleanup(func() {
		if m.zt != nil {
			m.zt.Stop()
		}
		if m.meshlet != nil {
			if err := m.meshlet.Stop(); err != nil {
				t.Errorf("meshlet stop: %v", err)
			}
		}
	})
	m.connectZtunnel()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func (m *mesh) startMeshlet() {
	m.t.Helper()
	ml, err := m.env.StartMeshlet(m.socket, m.flags...)
	if err != nil {
		m.t.Fatal(err)
	}
	if m.healthAddr != "" {
		ml.HealthURL = "http://" + m.healthAddr
	}
	m.meshlet = ml
}

// connectZtunnel connects a fresh ztunnel stand-in and waits for its
// snapshot.
func (m *mesh) connectZtunnel() {
	m.t.Helper()
	m.connectZtunnelDeciding(nil)
}

// connectZtunnelDeciding connects a ztunnel stand-in whose answers decide
// gives (zdstest.Ztunnel.Decide) and waits for its snapshot.
func (m *mesh) connectZtunnelDeciding(decide func(*zdstest.Request) string) {
	m.t.Helper()
	m.dialZtunnel(decide)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := m.zt.WaitSnapshot(ctx); err != nil {
		m.t.Fatal(err)
	}
}

// dialZtunnel connects a ztunnel stand-in whose answers decide gives,
// without waiting for its snapshot (meshlet ends it once it has listed the
// runtime's pods).
func (m *mesh) dialZtunnel(decide func(*zdstest.Request) string) {
	m.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	if m.state == nil {
		m.state = &zdstest.State{}
		m.t.Cleanup(m.state.Close)
	}
	zt := &zdstest.Ztunnel{Decide: decide, State: m.state}
	for {
		err := zt.Start(m.socket)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("ztunnel stand-in could not connect: %v (meshlet log %s)", err, m.meshlet.LogPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.zt = zt
}

func (m *mesh) adds(uid string) []*zdstest.Request {
	var out []*zdstest.Request
	for _, r := range m.zt.Requests() {
		if r.Kind == zdstest.Add && r.UID == uid {
			out = append(out, r)
		}
	}
	return out
}

func (m *mesh) waitFor(what string, cond func([]*zdstest.Request) bool) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := m.zt.WaitFor(ctx, cond); err != nil {
		m.t.Fatalf("waiting for %s: %v", what, err)
	}
}

type pod struct {
	spec env.PodSpec
	id   string
	info env.PodInfo
}

// podSeq numbers pods; tests on several runtimes run side by side.
var podSeq atomic.Int64

// runPod runs a pod sandbox in the shared environment.
func runPod(t *testing.T, namespace string, labels map[string]string, hostNetwork bool) *pod {
	t.Helper()
	return runPodIn(t, theEnv(t), namespace, labels, hostNetwork)
}

// runPodIn runs a pod sandbox in e; the test removes it at its end.
func runPodIn(t *testing.T, e *env.Env, namespace string, labels map[string]string, hostNetwork bool) *pod {
	t.Helper()
	seq := podSeq.Add(1)
	name := fmt.Sprintf("%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-", ".", "-").Replace(t.Name())), seq)
	if len(name) > 50 {
		name = name[len(name)-50:]
	}
	name = strings.TrimLeft(name, "-")
	p := &pod{spec: env.PodSpec{Name: name, Namespace: namespace, UID: fmt.Sprintf("uid-%d-%d", time.Now().UnixNano(), seq),
		Labels: labels, HostNetwork: hostNetwork}}
	id, err := e.RunPod(p.spec)
	if err != nil {
		t.Fatalf("run pod %s: %v", name, err)
	}
	p.id = id
	t.Cleanup(func() { _ = e.RemovePod(id) })
	if p.info, err = e.InspectPod(id); err != nil {
		t.Fatal(err)
	}
	return p
}

func hasRules(t *testing.T, netnsPath string) bool {
	t.Helper()
	err := exec.Command("nsenter", "--net="+netnsPath, "nft", "list", "table", "inet", "meshlet").Run()
	return err == nil
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	ino, err := env.Inode(path)
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// TestMeshPodLifecycle: a labelled pod is enrolled before RunPodSandbox
// returns (ztunnel has its netns, the rules are in place); other pods are
// untouched; stop and remove release it and leak no fd.
func TestMeshPodLifecycle(t *testing.T) { onEachRuntime(t, testMeshPodLifecycle) }

func testMeshPodLifecycle(t *testing.T, e *env.Env, rt matrixRuntime) {
	m := startMeshIn(t, e)
	meshPod := runPodIn(t, e, "app", ambient, false)
	// No waiting: RunPodSandbox returned, so the hook (rules, Add, Ack) did.
	adds := m.adds(meshPod.spec.UID)
	if len(adds) != 1 {
		t.Fatalf("ztunnel got %d adds for the mesh pod when runp returned, want 1 (all: %v)", len(adds), m.zt.Requests())
	}
	add := adds[0]
	if want := inode(t, meshPod.info.NetnsPath); add.NetnsInode != want {
		t.Errorf("Add carried netns inode %d, sandbox netns is %d", add.NetnsInode, want)
	}
	if add.Info.GetName() != meshPod.spec.Name || add.Info.GetNamespace() != "app" || add.Info.GetServiceAccount() != "default" {
		t.Errorf("workload info %v", add.Info)
	}
	if !hasRules(t, meshPod.info.NetnsPath) {
		t.Errorf("no redirection rules in the mesh pod's netns")
	}

	plain := runPodIn(t, e, "app", nil, false)
	host := runPodIn(t, e, "app", ambient, true)
	system := runPodIn(t, e, "kube-system", ambient, false)
	for _, p := range []*pod{plain, host, system} {
		if n := len(m.adds(p.spec.UID)); n != 0 {
			t.Errorf("pod %s/%s got %d adds, want none", p.spec.Namespace, p.spec.Name, n)
		}
		// A host-network pod's namespace is the node's (CRI-O reports
		// its path), where meshlet's node-side table lives.
		if !p.spec.HostNetwork && hasRules(t, p.info.NetnsPath) {
			t.Errorf("pod %s/%s has redirection rules", p.spec.Namespace, p.spec.Name)
		}
	}

	ino := inode(t, meshPod.info.NetnsPath)
	held := func() int {
		h, err := m.meshlet.HeldNetns()
		if err != nil {
			t.Fatal(err)
		}
		return h[ino]
	}
	if held() == 0 {
		t.Fatalf("meshlet holds no fd on the enrolled pod's netns")
	}
	if err := e.StopPod(meshPod.id); err != nil {
		t.Fatal(err)
	}
	m.waitFor("Del", func(rs []*zdstest.Request) bool { return hasDel(rs, meshPod.spec.UID) })
	if err := e.RemovePod(meshPod.id); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 0 {
		t.Fatalf("meshlet still holds %d fds on the removed pod's netns", n)
	}
	// Where the runtime's events carry no IPs, meshlet read them from the
	// pod's namespace (the Add above proves it right) and said so once.
	want := 1
	if rt.eventsCarryIPs {
		want = 0
	}
	if n := m.logLines(noIPsInEvents); n != want {
		t.Fatalf("meshlet logged %q %d times, want %d", noIPsInEvents, n, want)
	}
}

// logLines counts the lines of this meshlet's log (the environment's log
// file holds every daemon's; klog puts the pid in each line's header)
// that contain text.
func (m *mesh) logLines(text string) int {
	m.t.Helper()
	b, err := os.ReadFile(m.meshlet.LogPath)
	if err != nil {
		m.t.Fatal(err)
	}
	pid := fmt.Sprintf(" %d ", m.meshlet.Pid())
	n := 0
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, text) && strings.Contains(line, pid) {
			n++
		}
	}
	return n
}

// noIPsInEvents is what meshlet logs, once, on a runtime whose NRI events
// carry no pod IPs.
const noIPsInEvents = "The pod source gives no pod IPs"

func dialFrom(t *testing.T, nsPath, addr string) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return netnstest.Dial(ctx, nsPath, "tcp", addr)
}

func listenIn(t *testing.T, nsPath, addr string) net.Listener {
	t.Helper()
	l, err := netnstest.Listen(nsPath, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := netnstest.Accept(l, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPackets: traffic from another pod to an enrolled pod reaches
// ztunnel's inbound port inside it; a connection from the node (kubelet's
// probes) is SNATed to the probe address and reaches the app directly.
func TestPackets(t *testing.T) { onEachRuntime(t, testPackets) }

func testPackets(t *testing.T, e *env.Env, _ matrixRuntime) {
	startMeshIn(t, e)
	meshPod := runPodIn(t, e, "app", ambient, false)
	client := runPodIn(t, e, "app", nil, false)
	inbound := listenIn(t, meshPod.info.NetnsPath, ":15006")
	app := listenIn(t, meshPod.info.NetnsPath, ":8080")
	target := net.JoinHostPort(meshPod.info.IP, "8080")

	c, err := dialFrom(t, client.info.NetnsPath, target)
	if err != nil {
		t.Fatalf("pod to pod: %v", err)
	}
	c.Close()
	accept(t, inbound).Close()

	c, err = dialFrom(t, e.NetnsPath(), target)
	if err != nil {
		t.Fatalf("node to pod: %v", err)
	}
	c.Close()
	got := accept(t, app)
	defer got.Close()
	if src := got.RemoteAddr().(*net.TCPAddr).IP.String(); src != "169.254.7.127" {
		t.Fatalf("node's connection arrived from %s, want the probe address 169.254.7.127", src)
	}
}

// TestZtunnelReconnectReplays: a reconnecting ztunnel gets every enrolled
// pod, with its netns, then SnapshotSent.
func TestZtunnelReconnectReplays(t *testing.T) { onEachRuntime(t, testZtunnelReconnectReplays) }

func testZtunnelReconnectReplays(t *testing.T, e *env.Env, _ matrixRuntime) {
	m := startMeshIn(t, e)
	a := runPodIn(t, e, "app", ambient, false)
	b := runPodIn(t, e, "app", ambient, false)
	m.zt.Stop()
	m.connectZtunnel()
	got := zdstest.AddedInodes(m.zt.Requests())
	for _, p := range []*pod{a, b} {
		if got[p.spec.UID] != inode(t, p.info.NetnsPath) {
			t.Errorf("replay for %s: inode %d, want %d", p.spec.Name, got[p.spec.UID], inode(t, p.info.NetnsPath))
		}
	}
}

// TestMeshletRestart: pods keep their rules while meshlet is down; the new
// meshlet re-adopts them at Synchronize and ztunnel gets each once.
func TestMeshletRestart(t *testing.T) { onEachRuntime(t, testMeshletRestart) }

func testMeshletRestart(t *testing.T, e *env.Env, _ matrixRuntime) {
	m := startMeshIn(t, e)
	p := runPodIn(t, e, "app", ambient, false)
	gone := runPodIn(t, e, "app", ambient, false)
	handle := func() string {
		out, err := exec.Command("nsenter", "--net="+p.info.NetnsPath, "nft", "-a", "list", "table", "inet", "meshlet").Output()
		if err != nil {
			t.Fatalf("pod table: %v", err)
		}
		return strings.SplitN(string(out), "\n", 2)[0]
	}
	before := handle()
	m.zt.Stop()
	m.zt = nil
	if err := m.meshlet.Stop(); err != nil {
		t.Fatalf("meshlet stop: %v", err)
	}
	m.meshlet = nil
	// Removed while meshlet is away: its node-side probe SNAT entry must
	// not outlive it.
	if err := e.RemovePod(gone.id); err != nil {
		t.Fatal(err)
	}
	if !hasRules(t, p.info.NetnsPath) {
		t.Fatal("stopping meshlet removed a running pod's rules")
	}
	m.startMeshlet()
	m.connectZtunnel()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	m.waitFor("the running pod", func([]*zdstest.Request) bool { return len(m.adds(p.spec.UID)) > 0 })
	adds := m.adds(p.spec.UID)
	if len(adds) != 1 || adds[0].NetnsInode != inode(t, p.info.NetnsPath) {
		t.Fatalf("after restart ztunnel got %d adds for the pod (%v), want exactly 1 with its netns", len(adds), adds)
	}
	if !hasRules(t, p.info.NetnsPath) {
		t.Fatal("rules missing after restart")
	}
	// Adopted from the checkpoint, not rewritten.
	if after := handle(); after != before {
		t.Fatalf("the running pod's table was rewritten on restart (%s → %s)", before, after)
	}
	snat, err := e.Exec("nft", "list", "set", "inet", "meshlet", "probe-pods-v4")
	if err != nil {
		t.Fatalf("node SNAT set: %v\n%s", err, snat)
	}
	if !strings.Contains(snat, p.info.IP) || strings.Contains(snat, gone.info.IP) {
		t.Fatalf("node SNAT set after restart should hold %s and not %s:\n%s", p.info.IP, gone.info.IP, snat)
	}
}

// TestRuntimeRestart: meshlet reconnects to a restarted runtime and keeps
// enrolling; a pod from before the restart is released when it goes,
// whether or not the runtime tells NRI plugins of its stop and removal
// (containerd does not).
func TestRuntimeRestart(t *testing.T) { onEachRuntime(t, testRuntimeRestart) }

func testRuntimeRestart(t *testing.T, e *env.Env, rt matrixRuntime) {
	m := startMeshIn(t, e, "--standalone", "--cri-resync-interval=1s")
	before := runPodIn(t, e, "app", ambient, false)
	if err := e.RestartRuntime(); err != nil {
		t.Fatal(err)
	}
	if err := m.meshlet.WaitReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	after := runPodIn(t, e, "app", ambient, false)
	if len(m.adds(after.spec.UID)) != 1 {
		t.Fatalf("pod created after the runtime restart not enrolled: %v", m.zt.Requests())
	}
	if n := len(m.adds(before.spec.UID)); n != 1 {
		t.Fatalf("pod from before the restart was added %d times, want 1 (unchanged netns)", n)
	}

	if err := e.StopPod(before.id); err != nil {
		t.Fatal(err)
	}
	if err := e.RemovePod(before.id); err != nil {
		t.Fatal(err)
	}
	m.waitFor("ztunnel's Del of the pod removed after the restart", func(rs []*zdstest.Request) bool { return hasDel(rs, before.spec.UID) })
	// containerd 2.x sends no StopPodSandbox for it: the CRI listing
	// found the removal. CRI-O reports it; containerd 1.7 sometimes does
	// (matrixRuntime.removalAfterRestart).
	log, err := os.ReadFile(m.meshlet.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	reported := false
	for line := range strings.Lines(string(log)) {
		reported = reported || (strings.Contains(line, `"Pod sandbox stopping"`) || strings.Contains(line, `"Pod sandbox removed"`)) &&
			strings.Contains(line, `podUID="`+before.spec.UID+`"`)
	}
	if !reported {
		// The resync counts the removal just after its Del.
		waitMetric(t, m, "meshlet_missed_removals_total", func(v float64) bool { return v >= 1 })
	}
	missed := m.metric("meshlet_missed_removals_total")
	switch {
	case !reported && missed == 0:
		t.Fatalf("the runtime did not report the removal, yet meshlet_missed_removals_total is 0: where did the Del come from?")
	case rt.removalAfterRestart == removalMissed && (reported || missed == 0):
		t.Fatalf("%s reported the removal (%v) or the resync did not count it (%v): it is known never to report it", e.Runtime(), reported, missed)
	case rt.removalAfterRestart == removalReported && (!reported || missed != 0):
		t.Fatalf("%s did not report the removal (%v), or the resync counted it (%v): it is known to report it", e.Runtime(), reported, missed)
	}
	t.Logf("the runtime reported the removal of a pod from before its restart: %v", reported)
	if n := len(m.adds(after.spec.UID)); n != 1 || !hasRules(t, after.info.NetnsPath) {
		t.Fatalf("the pod still running was touched by the sweep: %d Adds, rules %v", n, hasRules(t, after.info.NetnsPath))
	}
	if hasDel(m.zt.Requests(), after.spec.UID) {
		t.Fatal("the sweep took the running pod for gone: ztunnel got its Del")
	}
}

// meshletRequired is how containerd's NRI validator names meshlet when it
// refuses a container because meshlet is not connected ("required plugin
// \"meshlet\" not present"). Not just "meshlet": the error names the pod too.
const meshletRequired = `required plugin "meshlet"`

// TestFailClosedWithoutMeshlet: with containerd 2.x's NRI validator
// requiring the meshlet plugin, no app container starts while meshlet is
// away. A runtime without a validator (containerd 1.7, CRI-O) starts it:
// that is the gap deploy/README names for them, pinned here so that a
// runtime gaining the lever shows. Either way, once meshlet is back the
// pod is enrolled late, counted, and its containers start.
func TestFailClosedWithoutMeshlet(t *testing.T) { onEachRuntime(t, testFailClosedWithoutMeshlet) }

func testFailClosedWithoutMeshlet(t *testing.T, e *env.Env, _ matrixRuntime) {
	p := runPodIn(t, e, "app", ambient, false) // sandbox only: no meshlet yet
	_, err := e.StartContainer(p.id, p.spec, "app")
	switch {
	case e.HasValidator() && (err == nil || !strings.Contains(err.Error(), meshletRequired)):
		t.Fatalf("app container without meshlet: %v, want a refusal naming the required plugin", err)
	case !e.HasValidator() && err != nil:
		t.Fatalf("%s has no NRI validator, yet refused the app container without meshlet: %v", e.Runtime(), err)
	}
	m := startMeshIn(t, e)
	m.waitFor("late enrollment", func([]*zdstest.Request) bool { return len(m.adds(p.spec.UID)) == 1 })
	if _, err := e.StartContainer(p.id, p.spec, "app2"); err != nil {
		t.Fatalf("app container with meshlet back: %v", err)
	}
	if _, body, err := m.meshlet.Get("http://127.0.0.1:9881/metrics"); err != nil || !strings.Contains(body, "meshlet_late_enrollments_total 1") {
		t.Fatalf("late enrollment not counted (%v):\n%s", err, body)
	}
}

// getDebug decodes path from the debug socket of the meshlet whose
// --state-dir is stateDir into v.
func getDebug(t *testing.T, stateDir, path string, v any) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(stateDir, "debug.sock"))
		}}}
	resp, err := client.Get("http://meshlet" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
