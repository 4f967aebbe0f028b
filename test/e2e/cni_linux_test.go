package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// cniCluster is a containerd without NRI and a real API server in the
// same "node" netns: where meshlet must enroll pods through meshlet-cni.
type cniCluster struct {
	t          *testing.T
	env        *env.Env
	client     kubernetes.Interface
	kubeconfig string
	seq        int
}

// startNoNRIEnv starts a containerd of the test's own with NRI off, in a
// directory named from prefix (short: socket paths); its logs stay when
// the test fails.
func startNoNRIEnv(t *testing.T, bin, prefix string) *env.Env {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	e, err := env.Start(env.Options{BinDir: bin, Dir: dir, DisableNRI: true, Logf: t.Logf})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("containerd without NRI: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("environment teardown: %v", err)
		}
		if t.Failed() {
			t.Logf("logs kept in %s/logs", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return e
}

func startCNICluster(t *testing.T) *cniCluster {
	privtest.RequireRoot(t)
	bin := privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directory test/env/install-runtime.sh prints (`make test` sets it)")
	kbin := privtest.RequireEnv(t, "MESHLET_KUBE_BIN", "the directory test/env/install-kube.sh prints (`make test` sets it)")
	e := startNoNRIEnv(t, bin, "mlcni")
	k, err := kubeenv.StartIn(kbin, t.TempDir(), e.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Stop() })
	c, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := k.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	for name, labels := range map[string]map[string]string{"mesh": ambient, "plain": nil, "kube-system": nil} {
		_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
		// No controller-manager here: the service account it would make.
		_, err = c.CoreV1().ServiceAccounts(name).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	return &cniCluster{t: t, env: e, client: c, kubeconfig: kubeconfig}
}

// apiPod creates the pod object the kubelet would run, in namespace.
func (cc *cniCluster) apiPod(t *testing.T, namespace string) *corev1.Pod {
	t.Helper()
	cc.seq++
	p, err := cc.client.CoreV1().Pods(namespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", cc.seq)},
		Spec: corev1.PodSpec{NodeName: env.NodeName, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "app", Image: env.Image}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runSandbox runs the sandbox of an API pod through CRI, as the kubelet
// would (attempt counts the kubelet's retries of one pod).
func (cc *cniCluster) runSandbox(p *corev1.Pod) (*pod, error) {
	spec := env.PodSpec{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)}
	id, err := cc.env.RunPod(spec)
	if err != nil {
		return nil, err
	}
	cc.t.Cleanup(func() { _ = cc.env.RemovePod(id) })
	info, err := cc.env.InspectPod(id)
	if err != nil {
		return nil, err
	}
	return &pod{spec: spec, id: id, info: info}, nil
}

func (cc *cniCluster) mustRun(t *testing.T, p *corev1.Pod) *pod {
	t.Helper()
	sb, err := cc.runSandbox(p)
	if err != nil {
		t.Fatalf("run sandbox of %s/%s: %v", p.Namespace, p.Name, err)
	}
	return sb
}

// chained reads the primary conflist and reports whether meshlet-cni is
// its last plugin, with the environment's agent socket.
func (cc *cniCluster) chained(file string) (bool, string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return false, err.Error()
	}
	var list struct {
		Plugins []struct {
			Type        string `json:"type"`
			AgentSocket string `json:"agentSocket"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return false, err.Error()
	}
	n := 0
	for _, p := range list.Plugins {
		if p.Type == "meshlet-cni" {
			n++
		}
	}
	last := list.Plugins[len(list.Plugins)-1]
	return n == 1 && last.Type == "meshlet-cni" && last.AgentSocket == cc.env.CNISocket(), string(b)
}

// excluded is the excludeNamespaces of meshlet-cni's entry in the primary
// conflist, comma-separated.
func (cc *cniCluster) excluded(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(cc.env.PrimaryConflist())
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Plugins []struct {
			Type              string   `json:"type"`
			ExcludeNamespaces []string `json:"excludeNamespaces"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("primary conflist: %v\n%s", err, b)
	}
	for _, p := range list.Plugins {
		if p.Type == "meshlet-cni" {
			return strings.Join(p.ExcludeNamespaces, ",")
		}
	}
	return "(no meshlet-cni entry)"
}

// enrolledNow asserts the pod was enrolled before its sandbox returned:
// ztunnel already has exactly its netns, and its rules are in place.
func enrolledNow(t *testing.T, m *mesh, p *pod) {
	t.Helper()
	adds := m.adds(p.spec.UID)
	if len(adds) != 1 || adds[0].NetnsInode != inode(t, p.info.NetnsPath) {
		t.Fatalf("pod %s: ztunnel got %v when its sandbox returned, want one Add with netns inode %d", p.spec.Name, adds, inode(t, p.info.NetnsPath))
	}
	if !hasRules(t, p.info.NetnsPath) {
		t.Fatalf("pod %s: no meshlet rules in its netns when its sandbox returned", p.spec.Name)
	}
}

func untouched(t *testing.T, m *mesh, p *pod) {
	t.Helper()
	if adds := m.adds(p.spec.UID); len(adds) != 0 {
		t.Fatalf("pod %s/%s: ztunnel got %v, want nothing", p.spec.Namespace, p.spec.Name, adds)
	}
	if hasRules(t, p.info.NetnsPath) {
		t.Fatalf("pod %s/%s: meshlet rules in its netns, want none", p.spec.Namespace, p.spec.Name)
	}
}

// metric fetches one sample of meshlet's /metrics.
func (m *mesh) metric(name string) float64 {
	m.t.Helper()
	_, page, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
	if err != nil {
		m.t.Fatal(err)
	}
	v, ok := metricValue(page, name)
	if !ok {
		m.t.Fatalf("metric %s not in /metrics", name)
	}
	return v
}

// TestCNIMode: on a containerd without NRI, meshlet (--mode auto) picks CNI
// mode, chains meshlet-cni into the runtime's conflist and enrolls mesh
// pods before their sandbox returns; plain pods are untouched; the chain
// survives a primary CNI rewriting its conflist while pods start (with
// --cni-own-conflist no pod even starts late); mesh
// pods fail closed while meshlet is away (a restart, a node reboot with
// the runtime back first) and are enrolled once it is back, while pods of
// the namespaces the node settings exclude start (meshlet-cni's entry
// follows the settings' ConfigMap); uninstall-cni gives the runtime its
// conflist back.
func TestCNIMode(t *testing.T) {
	cc := startCNICluster(t)
	original, err := os.ReadFile(cc.env.PrimaryConflist())
	if err != nil {
		t.Fatal(err)
	}
	// The node settings exclude kube-system, as the flags do; below, plain
	// too.
	if _, err := cc.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshlet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settings := func(excluded string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "meshlet"},
			Data: map[string]string{"settings.yaml": "apiVersion: meshlet.dev/v1alpha1\nkind: NodeSettings\nexcludedNamespaces: " + excluded + "\n"}}
	}
	if _, err := cc.client.CoreV1().ConfigMaps("meshlet").Create(context.Background(), settings("[kube-system]"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--kubeconfig=" + cc.kubeconfig, "--dra=false", "--config-map=meshlet/settings"}
	m := startMeshIn(t, cc.env, flags...)

	if v := m.metric(`meshlet_mode{mode="cni"}`); v != 1 {
		t.Fatalf(`meshlet_mode{mode="cni"} = %v, want 1 (log %s)`, v, m.meshlet.LogPath)
	}
	if ok, conf := cc.chained(cc.env.PrimaryConflist()); !ok {
		t.Fatalf("meshlet-cni is not chained last in the primary conflist:\n%s", conf)
	}
	// Ready, it has compared its CNI directories with the ones containerd
	// reports: the same.
	if log, err := os.ReadFile(m.meshlet.LogPath); err != nil || strings.Contains(string(log), "differ from the runtime's") {
		t.Fatalf("meshlet's CNI directories are the runtime's, yet (%v):\n%s", err, log)
	}
	// meshlet enable-nri names the runtime and what to set for it.
	out, err := exec.Command(cc.env.Meshlet, "enable-nri", "--nri-socket="+cc.env.NRISocket, "--cri-socket="+cc.env.CRISocket).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "containerd 2.4.2") || !strings.Contains(string(out), "[plugins.'io.containerd.nri.v1.nri']") ||
		strings.Contains(string(out), "crio") {
		t.Fatalf("meshlet enable-nri on containerd without NRI: %v\n%s\nwant a failure naming containerd 2.4.2 and its NRI settings only", err, out)
	}
	if _, err := os.Stat(filepath.Join(cc.env.CNIBinDir(), "meshlet-cni")); err != nil {
		t.Fatalf("meshlet-cni not installed in the runtime's CNI bin dir: %v", err)
	}

	t.Run("mesh pod enrolled before its sandbox returns, plain pod untouched", func(t *testing.T) {
		mesh := cc.mustRun(t, cc.apiPod(t, "mesh"))
		enrolledNow(t, m, mesh)
		plain := cc.mustRun(t, cc.apiPod(t, "plain"))
		untouched(t, m, plain)
		// meshlet status shows both, from the daemon's debug socket.
		out, err := exec.Command(cc.env.Meshlet, "status", "--all", "--state-dir="+cc.env.MeshletStateDir()).CombinedOutput()
		if err != nil {
			t.Fatalf("meshlet status: %v\n%s", err, out)
		}
		for _, want := range []string{"READY", "CNI (meshlet-cni chained), connected", mesh.spec.Name, "enrolled", "acked", plain.spec.Name, "skipped"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("meshlet status lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("removed pod released", func(t *testing.T) {
		p := cc.mustRun(t, cc.apiPod(t, "mesh"))
		enrolledNow(t, m, p)
		ino := inode(t, p.info.NetnsPath)
		if err := cc.env.RemovePod(p.id); err != nil {
			t.Fatal(err)
		}
		m.waitFor("ztunnel Del", func(rs []*zdstest.Request) bool { return hasDel(rs, p.spec.UID) })
		held, err := m.meshlet.HeldNetns()
		if err != nil {
			t.Fatal(err)
		}
		if n := held[ino]; n != 0 {
			t.Fatalf("meshlet still holds %d fds on the removed pod's netns", n)
		}
	})

	t.Run("primary conflist rewritten while pods start", func(t *testing.T) {
		// A primary CNI rewriting its conflist (without meshlet-cni) 20
		// times a second while mesh pods are created. meshlet re-asserts,
		// then backs off rather than fight a loop: with the primary edited
		// in place some pods are set up while the entry is missing.
		// meshlet enrolls them from the runtime's pod list, late and
		// counted. Every mesh pod must end up enrolled, and every one not
		// enrolled when its sandbox returned must be counted late.
		lateBefore := m.metric("meshlet_late_enrollments_total")
		reassertsBefore := m.metric("meshlet_cni_reasserts_total")
		rewrites := rewriteLoop(t, cc.env.PrimaryConflist(), original, 50*time.Millisecond)
		var pods []*pod
		onTime := 0
		for range 12 {
			p := cc.mustRun(t, cc.apiPod(t, "mesh"))
			pods = append(pods, p)
			if len(m.adds(p.spec.UID)) == 1 {
				onTime++
			}
		}
		n := rewrites()
		waitFor(t, "meshlet-cni chained again after the rewrites", func() bool { ok, _ := cc.chained(cc.env.PrimaryConflist()); return ok })
		for _, p := range pods {
			m.waitFor("pod "+p.spec.Name+" enrolled", func(rs []*zdstest.Request) bool { return len(m.adds(p.spec.UID)) == 1 })
			if !hasRules(t, p.info.NetnsPath) {
				t.Fatalf("pod %s: no rules after enrollment", p.spec.Name)
			}
		}
		late := int(m.metric("meshlet_late_enrollments_total") - lateBefore)
		reasserts := m.metric("meshlet_cni_reasserts_total") - reassertsBefore
		t.Logf("%d conflist rewrites, %v re-asserts; %d of %d mesh pods enrolled before their sandbox returned, %d enrolled late from the runtime's pod list",
			n, reasserts, onTime, len(pods), late)
		switch {
		case reasserts == 0:
			t.Fatalf("%d rewrites of the conflist and no re-assert counted", n)
		case onTime == len(pods):
			t.Fatalf("all %d pods enrolled on time while the conflist was rewritten %d times: the test did not open the window it checks", len(pods), n)
		case late < len(pods)-onTime || late > len(pods):
			t.Fatalf("%d pods were not enrolled when their sandbox returned, but meshlet counted %d late enrollments", len(pods)-onTime, late)
		}
	})

	t.Run("own conflist: rewrites of the primary never reach the runtime without meshlet-cni", func(t *testing.T) {
		// With --cni-own-conflist meshlet writes 05-meshlet.conflist, which
		// the runtime prefers (lexical order), and follows the primary's
		// content into it: even a primary rewriting its file 20 times a
		// second leaves no window, so every mesh pod is enrolled before
		// its sandbox returns.
		m.zt.Stop()
		if err := m.meshlet.Stop(); err != nil {
			t.Fatal(err)
		}
		m.flags = append(m.flags, "--cni-own-conflist")
		m.startMeshlet()
		m.connectZtunnel()
		if err := m.meshlet.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		own := filepath.Join(cc.env.CNIConfDir(), "05-meshlet.conflist")
		if ok, conf := cc.chained(own); !ok {
			t.Fatalf("05-meshlet.conflist does not chain meshlet-cni last:\n%s", conf)
		}
		rewrites := rewriteLoop(t, cc.env.PrimaryConflist(), original, 50*time.Millisecond)
		for range 12 {
			enrolledNow(t, m, cc.mustRun(t, cc.apiPod(t, "mesh")))
		}
		t.Logf("%d rewrites of the primary conflist; every mesh pod enrolled before its sandbox returned", rewrites())
		if v := m.metric("meshlet_late_enrollments_total"); v != 0 {
			t.Fatalf("meshlet_late_enrollments_total = %v, want 0", v)
		}

		// Back to editing the primary: the own conflist goes.
		m.zt.Stop()
		if err := m.meshlet.Stop(); err != nil {
			t.Fatal(err)
		}
		m.flags = m.flags[:len(m.flags)-1]
		m.startMeshlet()
		m.connectZtunnel()
		if err := m.meshlet.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		if ok, conf := cc.chained(cc.env.PrimaryConflist()); !ok {
			t.Fatalf("meshlet-cni not chained in the primary conflist after leaving --cni-own-conflist:\n%s", conf)
		}
		if _, err := os.Stat(own); !os.IsNotExist(err) {
			t.Fatalf("05-meshlet.conflist still there after leaving --cni-own-conflist: %v", err)
		}
	})

	t.Run("node settings' excluded namespaces reach meshlet-cni's entry", func(t *testing.T) {
		if got := cc.excluded(t); got != "istio-system,kube-system" {
			t.Fatalf("meshlet-cni's excludeNamespaces %q, want istio-system,kube-system", got)
		}
		if _, err := cc.client.CoreV1().ConfigMaps("meshlet").Update(context.Background(), settings("[kube-system, plain]"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForf(t, func() (bool, string) { return cc.excluded(t) == "istio-system,kube-system,plain", "" },
			func() string {
				return "meshlet-cni's excludeNamespaces istio-system,kube-system,plain; it is " + cc.excluded(t)
			})
	})

	var kept *pod
	t.Run("meshlet away: mesh pods fail closed, restart adopts", func(t *testing.T) {
		kept = cc.mustRun(t, cc.apiPod(t, "mesh"))
		enrolledNow(t, m, kept)
		m.zt.Stop()
		if err := m.meshlet.Stop(); err != nil {
			t.Fatal(err)
		}
		m.meshlet = nil
		if ok, conf := cc.chained(cc.env.PrimaryConflist()); !ok {
			t.Fatalf("a stopped meshlet (no DaemonSet deleted) must keep meshlet-cni chained:\n%s", conf)
		}
		refused := cc.apiPod(t, "mesh")
		if _, err := cc.runSandbox(refused); err == nil || !strings.Contains(err.Error(), "meshlet agent unreachable") {
			t.Fatalf("mesh pod with meshlet stopped: sandbox error %v, want meshlet-cni's refusal (agent unreachable)", err)
		}
		// The mesh's own infrastructure starts without an agent, and so do
		// the namespaces the node settings exclude.
		for _, ns := range []string{"kube-system", "plain"} {
			if _, err := cc.runSandbox(cc.apiPod(t, ns)); err != nil {
				t.Fatalf("%s pod with meshlet stopped: %v", ns, err)
			}
		}
		m.startMeshlet()
		m.connectZtunnel()
		if err := m.meshlet.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		m.waitFor("the running pod handed to the new ztunnel", func([]*zdstest.Request) bool { return len(m.adds(kept.spec.UID)) > 0 })
		// The kubelet retries the refused pod: now it is enrolled.
		fresh := cc.mustRun(t, refused)
		enrolledNow(t, m, fresh)
		if v := m.metric("meshlet_late_enrollments_total"); v != 0 {
			t.Fatalf("meshlet_late_enrollments_total = %v after a restart, want 0: no pod started while it was away", v)
		}
		held, err := m.meshlet.HeldNetns()
		if err != nil {
			t.Fatal(err)
		}
		// Adopted: held as a pod this meshlet enrolled is (the core's fd and
		// the ZDS server's for replays).
		if n := held[inode(t, kept.info.NetnsPath)]; n == 0 || n != held[inode(t, fresh.info.NetnsPath)] || !hasRules(t, kept.info.NetnsPath) {
			t.Fatalf("pod running across the restart not adopted: %d fds on its netns (a new pod: %d), rules %v",
				n, held[inode(t, fresh.info.NetnsPath)], hasRules(t, kept.info.NetnsPath))
		}
	})

	t.Run("node reboot: runtime back first, mesh pods wait for meshlet", func(t *testing.T) {
		m.zt.Stop() // ztunnel goes down with the node
		if err := m.meshlet.Kill(); err != nil {
			t.Fatal(err)
		}
		m.meshlet = nil
		if err := cc.env.Reboot(); err != nil {
			t.Fatal(err)
		}
		// The kubelet recreates the pod's sandbox before meshlet is back:
		// refused, never started unmeshed.
		again := cc.apiPod(t, "mesh")
		if _, err := cc.runSandbox(again); err == nil {
			t.Fatal("mesh pod created after a reboot with meshlet not yet running: want a refusal")
		}
		m.startMeshlet()
		m.connectZtunnel()
		if err := m.meshlet.WaitReady(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		p := cc.mustRun(t, again)
		enrolledNow(t, m, p)
		// Pods that died with the node are not adopted.
		for _, r := range m.zt.Requests() {
			if r.Kind == zdstest.Add && r.UID == kept.spec.UID {
				t.Fatalf("pod that died in the reboot handed to ztunnel again: %v", r)
			}
		}
	})

	t.Run("uninstall-cni restores the conflist", func(t *testing.T) {
		if err := m.meshlet.Stop(); err != nil {
			t.Fatal(err)
		}
		m.meshlet = nil
		if ok, conf := cc.chained(cc.env.PrimaryConflist()); !ok {
			t.Fatalf("meshlet-cni not chained before uninstall-cni:\n%s", conf)
		}
		out, err := exec.Command(cc.env.Meshlet, "uninstall-cni", "--cni-conf-dir="+cc.env.CNIConfDir(), "--cni-bin-dir="+cc.env.CNIBinDir(),
			"--cni-socket="+cc.env.CNISocket()).CombinedOutput()
		if err != nil {
			t.Fatalf("meshlet uninstall-cni: %v: %s", err, out)
		}
		got, err := os.ReadFile(cc.env.PrimaryConflist())
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(got, original) {
			t.Fatalf("conflist after uninstall-cni:\n%s\nwant the original:\n%s", got, original)
		}
		if _, err := os.Stat(filepath.Join(cc.env.CNIConfDir(), "05-meshlet.conflist")); !os.IsNotExist(err) {
			t.Fatalf("05-meshlet.conflist still there after uninstall-cni: %v", err)
		}
		if _, err := os.Stat(filepath.Join(cc.env.CNIBinDir(), "meshlet-cni")); !os.IsNotExist(err) {
			t.Fatalf("meshlet-cni binary still installed after uninstall-cni: %v", err)
		}
		// Without meshlet in the chain, pods start as the primary CNI says.
		untouched(t, m, cc.mustRun(t, cc.apiPod(t, "mesh")))
	})
}

// rewriteLoop rewrites file with content every interval, as a primary CNI
// that reinstalls its conflist does (write a temp file, rename over). The
// returned func stops it and returns how many rewrites it made.
func rewriteLoop(t *testing.T, file string, content []byte, interval time.Duration) func() int {
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tmp := file + ".primary-cni-tmp"
		for {
			if err := os.WriteFile(tmp, content, 0o644); err == nil && os.Rename(tmp, file) == nil {
				n.Add(1)
			}
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
		}
	})
	var once sync.Once
	done := func() int {
		once.Do(func() { close(stop); wg.Wait() })
		return int(n.Load())
	}
	t.Cleanup(func() { done() })
	return done
}

func hasDel(rs []*zdstest.Request, uid string) bool {
	for _, r := range rs {
		if r.Kind == zdstest.Del && r.UID == uid {
			return true
		}
	}
	return false
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
