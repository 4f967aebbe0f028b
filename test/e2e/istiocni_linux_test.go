package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/cnifallback/install"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// istioCNI is Istio's own node agent (install-cni, built from istio.io/istio
// by test/env/install-istio-cni.sh) running on the test node as a host
// process: it installs its CNI plugin into the runtime's chain, meshes the
// ambient pods the plugin reports and serves ztunnel's socket, as its
// DaemonSet's pod would. It runs in a mount namespace of its own that gives
// it the paths its container has: the host's root at /host (its plugin
// goes to /host/opt/cni/bin, here the test runtime's bin directory), its
// plugin at /opt/cni/bin and a service account token.
//
// No istio-cni-node DaemonSet exists: stopped, the agent finds none and
// takes its node state off the node (its plugin, its host rules), as it
// does when its DaemonSet no longer selects the node.
type istioCNI struct {
	t    testing.TB
	cmd  *exec.Cmd
	log  string
	done chan error
}

// istioAmbientSelector is istio-cni's chart default enablement selector.
const istioAmbientSelector = `- podSelector:
    matchLabels: {istio.io/dataplane-mode: ambient}
- podSelector:
    matchExpressions:
    - {key: istio.io/dataplane-mode, operator: NotIn, values: [none]}
  namespaceSelector:
    matchLabels: {istio.io/dataplane-mode: ambient}
`

// istioCNIScript sets up the agent's mount namespace and runs it.
const istioCNIScript = `set -eu
mount --rbind / /host
# istio-cni tells the node's netns by /host/proc/1/ns/net: on a node, PID
# 1's. Here the node is the test's netns, which this process is in (and
# the machine's PID 1 may not be ours to inspect).
mount --bind /proc/$$/ns /host/proc/1/ns
mount -t tmpfs istio-cni-src /opt
mkdir -p /opt/cni/bin
cp "$ISTIO_BIN/istio-cni" /opt/cni/bin/
mount -t tmpfs istio-cni-host-opt /host/opt
mkdir -p /host/opt/cni/bin
mount --bind "$TEST_CNI_BIN_DIR" /host/opt/cni/bin
mount -t tmpfs istio-cni-run /run
mkdir -p /run/secrets/kubernetes.io/serviceaccount
mount --bind "$TEST_SA_DIR" /run/secrets/kubernetes.io/serviceaccount
exec "$ISTIO_BIN/install-cni" --log_output_level=default:info --ctrlz_port=0
`

// requireIstioCNI is the directory of istio-cni's binaries.
func requireIstioCNI(t testing.TB) string {
	return privtest.RequireEnv(t, "MESHLET_ISTIO_CNI", "the directory test/env/install-istio-cni.sh prints (`make test` sets it)")
}

// startIstioCNI starts istio-cni's agent serving ztunnel at ztunnelSocket,
// and waits until its plugin is in the runtime's chain and it is ready.
// bin is test/env/install-istio-cni.sh's directory (requireIstioCNI).
func startIstioCNI(t testing.TB, c *clusterenv.Cluster, bin, ztunnelSocket string) *istioCNI {
	t.Helper()
	e := theEnv(t)
	dir, err := os.MkdirTemp("", "mlic")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// /host is where the agent finds the node; a directory only, its
	// content is the mount.
	if _, err := os.Stat("/host"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir("/host", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/host") })
	}
	// The pods' netns mounts reach the agent's mount namespace (a slave of
	// the node's) as they reach a pod's with HostToContainer propagation.
	if _, err := e.NetnsDir(); err != nil {
		t.Fatal(err)
	}
	// Its DaemonSet mounts ztunnel's directory from the host, creating it.
	if err := os.MkdirAll(filepath.Dir(ztunnelSocket), 0o755); err != nil {
		t.Fatal(err)
	}
	sa := filepath.Join(dir, "sa")
	for name, data := range map[string]string{"token": kubeenv.AdminToken, "namespace": "istio-system"} {
		if err := os.MkdirAll(sa, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sa, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(c.Kube.URL())
	if err != nil {
		t.Fatal(err)
	}
	ic := &istioCNI{t: t, log: filepath.Join(dir, "istio-cni.log"), done: make(chan error, 1)}
	logf, err := os.Create(ic.log)
	if err != nil {
		t.Fatal(err)
	}
	ic.cmd = exec.Command("nsenter", "--net="+e.NetnsPath(), "unshare", "--mount", "--propagation", "slave", "sh", "-c", istioCNIScript)
	ic.cmd.Stdout, ic.cmd.Stderr = logf, logf
	ic.cmd.Env = append(os.Environ(),
		"ISTIO_BIN="+bin, "TEST_CNI_BIN_DIR="+e.CNIBinDir(), "TEST_SA_DIR="+sa,
		"KUBECONFIG="+kubeconfig, "KUBERNETES_SERVICE_HOST="+api.Hostname(), "KUBERNETES_SERVICE_PORT="+api.Port(),
		"SKIP_TLS_VERIFY=true", "NODE_NAME="+env.NodeName, "KUBERNETES_NODE_NAME="+env.NodeName,
		"POD_NAME=istio-cni-node-e2e", "POD_NAMESPACE=istio-system",
		"MOUNTED_CNI_NET_DIR=/host"+e.CNIConfDir(), "CNI_NET_DIR="+e.CNIConfDir(), "CNI_AGENT_RUN_DIR="+filepath.Join(dir, "run"),
		"ZTUNNEL_UDS_ADDRESS="+ztunnelSocket, "MONITORING_PORT=25014",
		"AMBIENT_ENABLED=true", "AMBIENT_ENABLEMENT_SELECTOR="+istioAmbientSelector, "AMBIENT_DNS_CAPTURE=true", "AMBIENT_IPV6=true",
		"AMBIENT_RECONCILE_POD_RULES_ON_STARTUP=true", // its chart's default
		"EXCLUDE_NAMESPACES=kube-system", "REPAIR_ENABLED=false", "FORCE_IPTABLES_BINARY=nft")
	if err := ic.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ic.done <- ic.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		ic.stop()
		if t.Failed() {
			b, _ := os.ReadFile(ic.log)
			t.Logf("istio-cni's log:\n%s", tail(string(b), 60))
		}
	})
	waitForfWithin(t, time.Minute, func() (bool, string) {
		select {
		case err := <-ic.done:
			ic.done <- err
			b, _ := os.ReadFile(ic.log)
			t.Fatalf("istio-cni exited: %v\n%s", err, tail(string(b), 40))
		default:
		}
		conf, _ := os.ReadFile(e.PrimaryConflist())
		out, err := e.Exec("curl", "-sf", "http://127.0.0.1:8000/readyz")
		return strings.Contains(string(conf), `"istio-cni"`) && err == nil, fmt.Sprintf("readyz: %v %s", err, out)
	}, func() string { return "istio-cni's plugin chained and its agent ready" })
	return ic
}

// stop sends the agent SIGTERM, as the kubelet does to its pod, and waits
// for it to exit (its clean-up included).
func (ic *istioCNI) stop() {
	if ic.cmd.Process == nil {
		return
	}
	select {
	case err := <-ic.done:
		ic.done <- err
		return
	default:
	}
	// nsenter and unshare exec: the process is the agent itself.
	_ = ic.cmd.Process.Signal(syscall.SIGTERM)
	_ = ic.cmd.Process.Signal(syscall.SIGCONT) // if frozen
	select {
	case err := <-ic.done:
		ic.done <- err
	case <-time.After(60 * time.Second):
		_ = ic.cmd.Process.Kill()
		ic.t.Errorf("istio-cni did not exit within 60 s of SIGTERM")
	}
}

// signal sends the agent sig.
func (ic *istioCNI) signal(sig syscall.Signal) {
	if err := ic.cmd.Process.Signal(sig); err != nil {
		ic.t.Fatal(err)
	}
}

// logged reports whether the agent's log has line.
func (ic *istioCNI) logged(line string) bool {
	b, _ := os.ReadFile(ic.log)
	return strings.Contains(string(b), line)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestTakeOverFromIstioCni: on a node where istio-cni (Istio's own node
// agent and CNI plugin) meshed ambient pods, some with per-pod settings in
// annotations, meshlet installed from its chart waits, not ready, while
// istio-cni serves ztunnel's socket; once istio-cni is uninstalled from the
// node, meshlet takes the node over with the pods running: none restarted
// or re-created, the ztunnel stand-in (as strict as ztunnel, counting
// drains and proxy restarts) sees no disruption, each pod is handed over
// once in the netns ztunnel already serves it in, its status annotation
// never leaves enabled, meshlet's rules with the pod's settings replace
// istio-cni's, and new pods go through meshlet.
func TestTakeOverFromIstioCni(t *testing.T) {
	istioBin := requireIstioCNI(t)
	c := startCluster(t, nil)
	buildImageWith(t, "e2e-istio", true) // its uninstall writes Istio's rules

	ctx := t.Context()
	const ns = "istio-mesh"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ambient}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace's default service account", func() bool {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	r := newRelease(t, c)
	zt := followZtunnel(t, r.zt)
	ic := startIstioCNI(t, c, istioBin, r.zt)

	// istio-cni meshes the pods (the runtime refuses containers while
	// meshlet is absent, so they tolerate it: on a node without meshlet's
	// required plugin, they would not need to).
	type meshed struct {
		pod            *corev1.Pod
		dns, inbound   bool
		sandbox, netns string
		inode          uint64
	}
	var pods []*meshed
	for _, tc := range []struct {
		name         string
		annotations  map[string]string
		dns, inbound bool
	}{
		{"by-istio", nil, true, true},
		{"by-istio-no-dns", map[string]string{"ambient.istio.io/dns-capture": "false"}, false, true},
		{"by-istio-bypass-inbound", map[string]string{"ambient.istio.io/bypass-inbound-capture": "true"}, true, false},
	} {
		p := basePod(tc.name)
		p.Namespace = ns
		p.Annotations = map[string]string{tolerateMissingMeshlet: "true"}
		for k, v := range tc.annotations {
			p.Annotations[k] = v
		}
		pods = append(pods, &meshed{pod: createPod(t, c, p), dns: tc.dns, inbound: tc.inbound})
	}
	byIstio := zt.current()
	var uids []string
	for _, m := range pods {
		waitPod(t, c, m.pod, "Running, annotated ambient.istio.io/redirection=enabled", func(p *corev1.Pod) bool {
			return running(p) && p.Annotations["ambient.istio.io/redirection"] == "enabled"
		})
		m.pod = getPod(t, c, m.pod)
		m.sandbox, m.netns = podSandbox(t, m.pod)
		m.inode = inode(t, m.netns)
		if adds := byIstio.adds(string(m.pod.UID)); len(adds) != 1 || adds[0].NetnsInode != m.inode {
			t.Fatalf("istio-cni handed pod %s to ztunnel as %v, want one Add in its netns", m.pod.Name, adds)
		}
		if save := nsExec(t, m.netns, "iptables-nft-save"); !strings.Contains(save, "-j ISTIO_PRERT") {
			t.Fatalf("pod %s has no rules of istio-cni's:\n%s", m.pod.Name, save)
		}
		uids = append(uids, string(m.pod.UID))
	}
	var names []string
	for _, m := range pods {
		names = append(names, m.pod.Name)
	}
	statuses := watchRedirectionStatus(t, c, ns, names...)

	// The cut-over: meshlet installed as a user would, then istio-cni
	// uninstalled from the node.
	r.install("e2e-istio", nil)
	waitForfWithin(t, 2*time.Minute, func() (bool, string) {
		p := meshletPod(t, c)
		if p == nil {
			return false, "no meshlet pod"
		}
		log := podLog(t, p, "meshlet")
		return strings.Contains(log, "Another agent serves ztunnel's socket"), tail(log, 10)
	}, func() string { return "meshlet waiting for istio-cni to leave ztunnel's socket" })
	if p := meshletPod(t, c); podReady(p) {
		t.Fatalf("meshlet is Ready while istio-cni serves the node")
	}
	// Mesh pods keep coming through the cut-over, every 50 ms from before
	// istio-cni leaves until meshlet serves the node. They tolerate the
	// runtime's requirement of meshlet, as on a node without it: what
	// keeps one created between istio-cni's plugin leaving the chain and
	// meshlet's hook from running unmeshed is meshlet's standby hook.
	var during []*corev1.Pod
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; i < 40; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			p := basePod(fmt.Sprintf("during-%d", i))
			p.Namespace = ns
			p.Annotations = map[string]string{tolerateMissingMeshlet: "true"}
			during = append(during, createPod(t, c, p))
		}
	}()
	time.Sleep(2 * time.Second) // some of them meshed by istio-cni
	// The window, held open: istio-cni frozen as it would be between
	// taking its plugin out of the chain and closing ztunnel's socket
	// (whose connections its kernel socket still queues, so meshlet still
	// waits). A mesh pod started then is meshed by no one: meshlet's
	// standby hook refuses its sandbox, and the kubelet's next attempt
	// finds meshlet serving the node.
	ic.signal(syscall.SIGSTOP)
	if _, err := install.Unchain(theEnv(t).CNIConfDir(), install.IstioCNIPluginType); err != nil {
		t.Fatal(err)
	}
	inWindow := basePod("in-the-window")
	inWindow.Namespace = ns
	inWindow.Annotations = map[string]string{tolerateMissingMeshlet: "true"}
	inWindow = createPod(t, c, inWindow)
	waitForfWithin(t, time.Minute, func() (bool, string) {
		log := podLog(t, meshletPod(t, c), "meshlet")
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "Refused a mesh pod's sandbox while waiting to take the node over") && strings.Contains(line, `pod="`+ns+"/"+inWindow.Name+`"`) {
				return true, ""
			}
		}
		return false, tail(log, 5)
	}, func() string { return "meshlet's standby hook refusing the sandbox of a pod no agent meshed" })
	start := time.Now()
	ic.stop()
	istioGone := time.Since(start)
	byMeshlet := zt.current()
	handedOver := time.Since(start)
	served := r.waitRolledOut("e2e-istio")
	ready := time.Since(start)
	close(stop)
	<-stopped

	if !ic.logged("shutting down normally") {
		t.Errorf("istio-cni did not take its node state off the node (its uninstall)")
	}
	if conf, _ := os.ReadFile(theEnv(t).PrimaryConflist()); strings.Contains(string(conf), `"istio-cni"`) {
		t.Errorf("istio-cni's plugin is still chained:\n%s", conf)
	}
	for _, m := range pods {
		p := getPod(t, c, m.pod)
		if p.UID != m.pod.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s restarted or re-created: uid %s, restarts %d", p.Name, p.UID, p.Status.ContainerStatuses[0].RestartCount)
		}
		if sandbox, _ := podSandbox(t, p); sandbox != m.sandbox {
			t.Errorf("pod %s: sandbox %s, was %s", p.Name, sandbox, m.sandbox)
		}
		if adds := byMeshlet.adds(string(p.UID)); len(adds) != 1 || adds[0].NetnsInode != m.inode {
			t.Errorf("meshlet handed pod %s to ztunnel as %v, want one Add in the netns ztunnel serves it in", p.Name, adds)
		}
	}
	if d := zt.ztunnel().Disruptions(uids...); len(d) > 0 {
		t.Errorf("the cut-over disrupted pods at ztunnel:\n%s", strings.Join(d, "\n"))
	}
	if v := zt.ztunnel().Violations(); len(v) > 0 {
		t.Errorf("an agent broke ztunnel's protocol: %q", v)
	}
	// meshlet's rules replace istio-cni's (removed in the background).
	for _, m := range pods {
		waitForf(t, func() (bool, string) {
			save := nsExec(t, m.netns, "iptables-nft-save") + nsExec(t, m.netns, "ip6tables-nft-save")
			tables := nsExec(t, m.netns, "nft", "list", "tables")
			return !strings.Contains(save, "ISTIO_") && !strings.Contains(tables, "istio-ambient"), save + tables
		}, func() string { return "istio-cni's rules gone from pod " + m.pod.Name })
		rules := nsExec(t, m.netns, "nft", "list", "table", "inet", "meshlet")
		if got := strings.Contains(rules, "redirect to :15053"); got != m.dns {
			t.Errorf("pod %s: DNS redirected = %v, want %v (its annotation):\n%s", m.pod.Name, got, m.dns, rules)
		}
		if got := strings.Contains(rules, "redirect to :15006"); got != m.inbound {
			t.Errorf("pod %s: inbound captured = %v, want %v (its annotation):\n%s", m.pod.Name, got, m.inbound, rules)
		}
	}
	// Each pod created during the cut-over runs, meshed by one agent
	// before its app started, and ends enrolled by meshlet; ztunnel never
	// restarted its proxy.
	//
	// A pod's first sandbox may also fail while istio-cni stops (its CNI
	// add cut short after ztunnel had the pod: istio-cni's own doing): the
	// kubelet creates another, and ztunnel replaces a proxy no app ever
	// used. Such a pod's app must not have restarted; the pods whose
	// sandbox stayed must not have been disrupted at all.
	byIstioCNI, recreated, refused := 0, 0, strings.Count(podLog(t, served, "meshlet"), "Refused a mesh pod's sandbox while waiting")
	for _, p := range append(during, inWindow) {
		waitPod(t, c, p, "Running", running)
		checkEnrolled(t, byMeshlet, p, true)
		if added, started := zt.firstAdd(string(p.UID)), appStarted(t, p); added.IsZero() || !added.Before(started) {
			t.Errorf("pod %s, created during the cut-over: app container started at %s, ztunnel's first Add at %s: it ran unmeshed",
				p.Name, started.Format(time.RFC3339Nano), added.Format(time.RFC3339Nano))
		}
		_, netns := podSandbox(t, p)
		first := firstAddInode(zt, string(p.UID))
		switch {
		case first != inode(t, netns):
			recreated++
			if n := getPod(t, c, p).Status.ContainerStatuses[0].RestartCount; n != 0 {
				t.Errorf("pod %s: its app restarted %d times across its sandbox's re-creation", p.Name, n)
			}
			continue
		case len(byIstio.adds(string(p.UID))) > 0:
			byIstioCNI++
		}
		uids = append(uids, string(p.UID))
	}
	if d := zt.ztunnel().Disruptions(uids...); len(d) > 0 {
		t.Errorf("the cut-over disrupted pods:\n%s", strings.Join(d, "\n"))
	}
	if log, want := podLog(t, served, "meshlet"), len(pods)+byIstioCNI; strings.Count(log, "Took a pod over from istio-cni") != want {
		t.Errorf("meshlet's log says it took %d pods over from istio-cni, want %d:\n%s", strings.Count(log, "Took a pod over from istio-cni"), want, log)
	}
	t.Logf("%d pods created during the cut-over: %d meshed by istio-cni and taken over, %d by meshlet (%d in a second sandbox, the first failed as istio-cni stopped); %d sandboxes refused by meshlet's standby hook",
		len(during), byIstioCNI, len(during)-byIstioCNI, recreated, refused)
	if seen := statuses(); len(seen) > 0 {
		t.Errorf("a pod's redirection status left enabled during the cut-over: %q", seen)
	}

	// New pods go through meshlet, enrolled before their app starts.
	after := ambientPod(t, c, ns, "after-cut-over")
	waitPod(t, c, after, "Running", running)
	checkEnrolled(t, byMeshlet, after, true)
	if added, started := zt.firstAdd(string(after.UID)), appStarted(t, after); added.IsZero() || !added.Before(started) {
		t.Errorf("pod %s: app container started at %s, ztunnel's first Add at %s", after.Name, started, added)
	}
	t.Logf("cut-over of a node with %d pods: istio-cni exited %v after SIGTERM, ztunnel had meshlet's snapshot after %v, meshlet's pod Ready after %v; disruptions at ztunnel: %d",
		len(pods), istioGone.Round(time.Millisecond), handedOver.Round(time.Millisecond), ready.Round(time.Millisecond), len(zt.ztunnel().Disruptions(uids...)))
	uids = append(uids, string(after.UID))

	// And back: meshlet uninstalled, istio-cni installed again. meshlet's
	// uninstall leaves the pods' rules and status; istio-cni takes the
	// pods annotated enabled as its own and hands each to ztunnel in the
	// netns ztunnel serves it in.
	statuses = watchRedirectionStatus(t, c, ns, names...)
	r.mustHelm("uninstall", "meshlet", "-n", meshletNamespace, "--cascade=foreground", "--wait")
	waitFor(t, "meshlet's pod gone", func() bool { return meshletPod(t, c) == nil })
	// It left each pod with Istio's own rules in place of its table.
	for _, p := range pods {
		if save := nsExec(t, p.netns, "iptables-nft-save"); !strings.Contains(save, "-j ISTIO_PRERT") || hasRules(t, p.netns) {
			t.Errorf("pod %s after meshlet's uninstall: want Istio's rules and no meshlet table:\n%s%s", p.pod.Name, save, nsExec(t, p.netns, "nft", "list", "tables"))
		}
	}
	back := time.Now()
	startIstioCNI(t, c, istioBin, r.zt)
	byIstioAgain := zt.current()
	handedBack := time.Since(back)
	meshPods := append(append(append([]*corev1.Pod{}, during...), inWindow, after), func() []*corev1.Pod {
		var out []*corev1.Pod
		for _, m := range pods {
			out = append(out, m.pod)
		}
		return out
	}()...)
	for _, p := range meshPods {
		_, netns := podSandbox(t, p)
		if adds := byIstioAgain.adds(string(p.UID)); len(adds) != 1 || adds[0].NetnsInode != inode(t, netns) {
			t.Errorf("istio-cni, installed again, handed pod %s to ztunnel as %v, want one Add in its netns", p.Name, adds)
		}
		// Istio's rules, which it reconciles (its chart's default), and
		// nothing of meshlet's.
		if save := nsExec(t, netns, "iptables-nft-save"); !strings.Contains(save, "-j ISTIO_PRERT") || hasRules(t, netns) {
			t.Errorf("pod %s after the way back: want istio-cni's rules only:\n%s", p.Name, save)
		}
	}
	if d := zt.ztunnel().Disruptions(uids...); len(d) > 0 {
		t.Errorf("the way back to istio-cni disrupted pods at ztunnel:\n%s", strings.Join(d, "\n"))
	}
	if v := zt.ztunnel().Violations(); len(v) > 0 {
		t.Errorf("an agent broke ztunnel's protocol on the way back: %q", v)
	}
	if seen := statuses(); len(seen) > 0 {
		t.Errorf("a pod's redirection status left enabled on the way back: %q", seen)
	}
	again := basePod("back-to-istio-cni")
	again.Namespace = ns
	again.Annotations = map[string]string{tolerateMissingMeshlet: "true"}
	again = createPod(t, c, again)
	waitPod(t, c, again, "Running, annotated ambient.istio.io/redirection=enabled", func(p *corev1.Pod) bool {
		return running(p) && p.Annotations["ambient.istio.io/redirection"] == "enabled"
	})
	if adds := byIstioAgain.adds(string(again.UID)); len(adds) != 1 {
		t.Errorf("a new pod after the way back: %v, want one Add from istio-cni", adds)
	}
	t.Logf("back to istio-cni: ztunnel had its snapshot %v after it started; disruptions at ztunnel: %d",
		handedBack.Round(time.Millisecond), len(zt.ztunnel().Disruptions(uids...)))
}

// nsExec runs a command in the network namespace at path.
func nsExec(t testing.TB, path, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + path, name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s in %s: %v\n%s", name, path, err, out)
	}
	return string(out)
}

// firstAddInode is the netns of ztunnel's first Add for the pod, in any
// session (0 if none).
func firstAddInode(zt *ztunnelFollower, uid string) uint64 {
	var first *zdstest.Request
	for _, s := range zt.all() {
		for _, r := range s.Requests() {
			if r.Kind == zdstest.Add && r.UID == uid && (first == nil || r.At.Before(first.At)) {
				first = r
			}
		}
	}
	if first == nil {
		return 0
	}
	return first.NetnsInode
}

// meshletPod is meshlet's DaemonSet pod on the node, nil before there is one.
func meshletPod(t testing.TB, c *clusterenv.Cluster) *corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(meshletNamespace).List(t.Context(), meshletPods)
	if err != nil || len(pods.Items) == 0 {
		return nil
	}
	return &pods.Items[len(pods.Items)-1]
}

// watchRedirectionStatus watches the named pods of namespace ns from now
// on; the func it returns stops and names every change of one's
// ambient.istio.io/redirection to something other than enabled.
func watchRedirectionStatus(t testing.TB, c *clusterenv.Cluster, ns string, names ...string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Modified && slices.Contains(names, p.Name) {
				if v := p.Annotations["ambient.istio.io/redirection"]; v != "enabled" {
					seen = append(seen, p.Name+"="+v)
				}
			}
		}
	}()
	return func() []string {
		cancel()
		w.Stop()
		<-done
		return seen
	}
}
