package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/test/e2e/env"
)

var ambient = map[string]string{"istio.io/dataplane-mode": "ambient"}

// mesh is one meshlet daemon plus a ztunnel stand-in.
type mesh struct {
	t       testing.TB
	env     *env.Env
	socket  string
	meshlet *env.Meshlet
	zt      *zdstest.Ztunnel
	flags   []string
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
	m := &mesh{t: t, env: e, socket: filepath.Join(t.TempDir(), "zt.sock"), flags: flags}
	m.startMeshlet()
	m.connectZtunnel()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
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
	return m
}

func (m *mesh) startMeshlet() {
	m.t.Helper()
	ml, err := m.env.StartMeshlet(m.socket, m.flags...)
	if err != nil {
		m.t.Fatal(err)
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
	deadline := time.Now().Add(15 * time.Second)
	zt := &zdstest.Ztunnel{Decide: decide}
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := zt.WaitSnapshot(ctx); err != nil {
		m.t.Fatal(err)
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

var podSeq int

func runPod(t *testing.T, namespace string, labels map[string]string, hostNetwork bool) *pod {
	t.Helper()
	podSeq++
	name := fmt.Sprintf("%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), podSeq)
	if len(name) > 50 {
		name = name[len(name)-50:]
	}
	name = strings.TrimLeft(name, "-")
	p := &pod{spec: env.PodSpec{Name: name, Namespace: namespace, UID: fmt.Sprintf("uid-%d-%d", time.Now().UnixNano(), podSeq),
		Labels: labels, HostNetwork: hostNetwork}}
	id, err := theEnv(t).RunPod(p.spec)
	if err != nil {
		t.Fatalf("run pod %s: %v", name, err)
	}
	p.id = id
	t.Cleanup(func() { _ = theEnv(t).RemovePod(id) })
	if p.info, err = theEnv(t).InspectPod(id); err != nil {
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
func TestMeshPodLifecycle(t *testing.T) {
	m := startMesh(t)
	meshPod := runPod(t, "app", ambient, false)
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

	plain := runPod(t, "app", nil, false)
	host := runPod(t, "app", ambient, true)
	system := runPod(t, "kube-system", ambient, false)
	for _, p := range []*pod{plain, host, system} {
		if n := len(m.adds(p.spec.UID)); n != 0 {
			t.Errorf("pod %s/%s got %d adds, want none", p.spec.Namespace, p.spec.Name, n)
		}
		if p.info.NetnsPath != "" && hasRules(t, p.info.NetnsPath) {
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
	if err := theEnv(t).StopPod(meshPod.id); err != nil {
		t.Fatal(err)
	}
	m.waitFor("Del", func(rs []*zdstest.Request) bool { return hasDel(rs, meshPod.spec.UID) })
	if err := theEnv(t).RemovePod(meshPod.id); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 0 {
		t.Fatalf("meshlet still holds %d fds on the removed pod's netns", n)
	}
}

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
func TestPackets(t *testing.T) {
	startMesh(t)
	meshPod := runPod(t, "app", ambient, false)
	client := runPod(t, "app", nil, false)
	inbound := listenIn(t, meshPod.info.NetnsPath, ":15006")
	app := listenIn(t, meshPod.info.NetnsPath, ":8080")
	target := net.JoinHostPort(meshPod.info.IP, "8080")

	c, err := dialFrom(t, client.info.NetnsPath, target)
	if err != nil {
		t.Fatalf("pod to pod: %v", err)
	}
	c.Close()
	accept(t, inbound).Close()

	c, err = dialFrom(t, theEnv(t).NetnsPath(), target)
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
func TestZtunnelReconnectReplays(t *testing.T) {
	m := startMesh(t)
	a := runPod(t, "app", ambient, false)
	b := runPod(t, "app", ambient, false)
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
func TestMeshletRestart(t *testing.T) {
	m := startMesh(t)
	p := runPod(t, "app", ambient, false)
	gone := runPod(t, "app", ambient, false)
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
	if err := theEnv(t).RemovePod(gone.id); err != nil {
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
	snat, err := theEnv(t).Exec("nft", "list", "set", "inet", "meshlet", "probe-pods-v4")
	if err != nil {
		t.Fatalf("node SNAT set: %v\n%s", err, snat)
	}
	if !strings.Contains(snat, p.info.IP) || strings.Contains(snat, gone.info.IP) {
		t.Fatalf("node SNAT set after restart should hold %s and not %s:\n%s", p.info.IP, gone.info.IP, snat)
	}
}

// TestContainerdRestart: meshlet reconnects to a restarted runtime and
// keeps enrolling; a pod from before the restart is released when it goes,
// although containerd does not tell NRI plugins of its stop and removal.
func TestContainerdRestart(t *testing.T) {
	m := startMesh(t, "--standalone", "--cri-resync-interval=1s")
	before := runPod(t, "app", ambient, false)
	if err := theEnv(t).RestartContainerd(); err != nil {
		t.Fatal(err)
	}
	if err := m.meshlet.WaitReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	after := runPod(t, "app", ambient, false)
	if len(m.adds(after.spec.UID)) != 1 {
		t.Fatalf("pod created after the runtime restart not enrolled: %v", m.zt.Requests())
	}
	if n := len(m.adds(before.spec.UID)); n != 1 {
		t.Fatalf("pod from before the restart was added %d times, want 1 (unchanged netns)", n)
	}

	if err := theEnv(t).StopPod(before.id); err != nil {
		t.Fatal(err)
	}
	if err := theEnv(t).RemovePod(before.id); err != nil {
		t.Fatal(err)
	}
	m.waitFor("ztunnel's Del of the pod removed after the restart", func(rs []*zdstest.Request) bool { return hasDel(rs, before.spec.UID) })
	// containerd 2.4.2 sends no StopPodSandbox for it: the CRI listing
	// found the removal. Should a runtime report it, the Del came from
	// the report and nothing was missed.
	log, err := os.ReadFile(m.meshlet.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	reported := false
	for line := range strings.Lines(string(log)) {
		reported = reported || strings.Contains(line, `"Pod sandbox stopping"`) && strings.Contains(line, `podUID="`+before.spec.UID+`"`)
	}
	if missed := m.metric("meshlet_missed_removals_total"); reported != (missed == 0) {
		t.Fatalf("the runtime reported the removal: %v, yet meshlet_missed_removals_total is %v", reported, missed)
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

// TestFailClosedWithoutMeshlet: with containerd's NRI validator requiring
// the meshlet plugin, no app container starts while meshlet is away; once
// it is back, the pod is enrolled late and its container starts.
func TestFailClosedWithoutMeshlet(t *testing.T) {
	p := runPod(t, "app", ambient, false) // sandbox only: no meshlet yet
	if _, err := theEnv(t).StartContainer(p.id, p.spec, "app"); err == nil || !strings.Contains(err.Error(), meshletRequired) {
		t.Fatalf("app container without meshlet: %v, want a refusal naming the required plugin", err)
	}
	m := startMesh(t)
	m.waitFor("late enrollment", func([]*zdstest.Request) bool { return len(m.adds(p.spec.UID)) == 1 })
	if _, err := theEnv(t).StartContainer(p.id, p.spec, "app2"); err != nil {
		t.Fatalf("app container with meshlet back: %v", err)
	}
	if _, body, err := m.meshlet.Get("http://127.0.0.1:9881/metrics"); err != nil || !strings.Contains(body, "meshlet_late_enrollments_total 1") {
		t.Fatalf("late enrollment not counted (%v):\n%s", err, body)
	}
}
