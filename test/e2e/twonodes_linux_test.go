package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// Node B of a two-node cluster: its name, address and pods' network.
const (
	nodeB       = "node-b"
	nodeBIP     = "192.0.2.101"
	nodeBSubnet = "198.51.100.0/24"
	// meshTaint is the chart's node taint (nodeReadiness, the DRA
	// driver's not-ready key).
	meshTaint = "mesh.meshlet.dev/not-ready"
)

// twoNodes is a cluster of two nodes on this machine, with meshlet's
// release for both. Node A is the cluster's first node, on a runtime of
// the test's own. Node B has its own containerd and kubelet, in a network
// namespace and a mount namespace of its own: there, node A's paths (its
// runtime's directory, the kubelet's root dir, the release's directory,
// the kubelet's fixed paths) are node B's own directories, so that the
// DaemonSet's one set of host paths names each node's own files.
type twoNodes struct {
	t    *testing.T
	c    *clusterenv.Cluster
	a, b *env.Env
	node *clusterenv.Node // node B
	mnt  *env.MountNamespace
	r    *release
	// bDir is where node B keeps what is at path p on node A.
	bDirs map[string]string
}

// startTwoNodes starts the cluster with node B registering with the mesh
// taint, and builds meshlet's image (tag) into both runtimes; the release
// is not installed.
func startTwoNodes(t *testing.T, tag string) *twoNodes {
	t.Helper()
	// Node B's runtime and mount namespace stop after the cluster (which
	// deletes the pods of both nodes first): registered before it.
	var teardownB []func() error
	t.Cleanup(func() {
		for _, f := range slices.Backward(teardownB) {
			if err := f(); err != nil {
				t.Errorf("node %s teardown: %v", nodeB, err)
			}
		}
	})
	a := privateRuntimeEnv(t, env.Containerd, "MESHLET_E2E_BIN", "test/env/install-runtime.sh")
	c := startClusterOn(t, a, clusterenv.Options{})
	r := newReleaseOn(t, c, a)

	base, err := os.MkdirTemp("", "mlnb") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	teardownB = append(teardownB, func() error {
		if !t.Failed() {
			return os.RemoveAll(base)
		}
		t.Logf("node %s files kept in %s", nodeB, base)
		return nil
	})
	tn := &twoNodes{t: t, c: c, a: a, r: r, bDirs: map[string]string{
		filepath.Dir(a.CRISocket): filepath.Join(base, "env"),
		c.KubeletRootDir():        filepath.Join(base, "kubelet"),
		r.dir:                     filepath.Join(base, "release"),
		"/var/lib/kubelet":        filepath.Join(base, "var-lib-kubelet"),
		"/var/log/pods":           filepath.Join(base, "var-log-pods"),
		"/var/log/containers":     filepath.Join(base, "var-log-containers"),
	}}
	var overlays []env.Overlay
	for target, source := range tn.bDirs {
		overlays = append(overlays, env.Overlay{Target: target, Source: source})
	}
	if tn.mnt, err = env.NewMountNamespace(filepath.Join(base, "ns"), overlays); err != nil {
		t.Fatal(err)
	}
	teardownB = append(teardownB, tn.mnt.Destroy)
	bEnvDir := tn.bDirs[filepath.Dir(a.CRISocket)]
	tn.b, err = env.Start(env.Options{BinDir: a.BinDir(), Dir: bEnvDir, NodeDir: filepath.Dir(a.CRISocket),
		MountNamespace: tn.mnt.Path, Subnet: nodeBSubnet, Logf: t.Logf})
	if err != nil {
		t.Fatalf("node %s runtime: %v", nodeB, err)
	}
	teardownB = append(teardownB, tn.b.Stop)
	if tn.node, err = c.AddNode(clusterenv.NodeOptions{Name: nodeB, NetnsPath: tn.b.NetnsPath(), MountNamespace: tn.mnt.Path,
		CRISocket: a.CRISocket, IP: nodeBIP, RegisterWithTaints: []string{meshTaint + ":NoSchedule"},
		RemoveSandboxes: func() error { _, err := tn.b.Crictl("rmp", "--all", "--force"); return err }}); err != nil {
		t.Fatal(err)
	}
	importImage(t, buildImageTar(t, tag, false), tag, a, tn.b)
	return tn
}

// onB is where node B keeps the file at path p of node A (p itself when
// node B shares it).
func (tn *twoNodes) onB(p string) string {
	for target, source := range tn.bDirs {
		if rel, err := filepath.Rel(target, p); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(source, rel)
		}
	}
	return p
}

// meshletPods waits until the DaemonSet runs a Ready meshlet on both
// nodes and returns them by node.
func (tn *twoNodes) meshletPods() map[string]*corev1.Pod {
	tn.t.Helper()
	var byNode map[string]*corev1.Pod
	waitForfWithin(tn.t, 3*time.Minute, func() (bool, string) {
		pods, err := tn.c.Client.CoreV1().Pods(meshletNamespace).List(context.Background(), meshletPods)
		if err != nil {
			return false, err.Error()
		}
		byNode = map[string]*corev1.Pod{}
		var seen []string
		for i, p := range pods.Items {
			seen = append(seen, fmt.Sprintf("%s on %s: %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p)))
			if podReady(&p) {
				byNode[p.Spec.NodeName] = &pods.Items[i]
			}
		}
		return len(byNode) == 2, strings.Join(seen, "; ")
	}, func() string {
		return "meshlet Ready on both nodes (node " + nodeB + "'s kubelet log: " + tn.node.KubeletLog() + ")"
	})
	return byNode
}

// ztunnel connects a ztunnel stand-in to meshlet's socket on node (A's
// name, env.NodeName, or nodeB); Stop disconnects it.
func (tn *twoNodes) ztunnel(node string) *zdstest.Ztunnel {
	tn.t.Helper()
	socket := tn.r.zt
	if node == nodeB {
		socket = tn.onB(socket)
	}
	zt := &zdstest.Ztunnel{}
	waitFor(tn.t, "a ztunnel stand-in connected to meshlet's socket on "+node, func() bool { return zt.Start(socket) == nil })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := zt.WaitSnapshot(ctx); err != nil {
		tn.t.Fatal(err)
	}
	tn.t.Cleanup(zt.Stop)
	return zt
}

// meshTaintOf is the node's mesh taint's value, and whether it has one.
func (tn *twoNodes) meshTaintOf(node string) (string, bool) {
	n, err := tn.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	return meshTaintIn(n)
}

// waitTaint waits until node has the mesh taint (want) or not, and
// returns when it saw it: through a watch, so that what it measures is the
// API server's, not a poll's (the test's client is rate-limited).
func (tn *twoNodes) waitTaint(node string, want bool) time.Time {
	tn.t.Helper()
	return tn.waitNode(node, fmt.Sprintf("mesh taint present=%v", want), func(n *corev1.Node) bool {
		_, has := meshTaintIn(n)
		return has == want
	})
}

// waitTaintValue waits until node has the mesh taint with value.
func (tn *twoNodes) waitTaintValue(node, value string) {
	tn.t.Helper()
	tn.waitNode(node, "mesh taint "+value, func(n *corev1.Node) bool {
		v, has := meshTaintIn(n)
		return has && v == value
	})
}

// meshTaintIn is the node's mesh taint's value, and whether it has one.
func meshTaintIn(n *corev1.Node) (string, bool) {
	for _, taint := range n.Spec.Taints {
		if taint.Key == meshTaint && taint.Effect == corev1.TaintEffectNoSchedule {
			return taint.Value, true
		}
	}
	return "", false
}

// nodeWatch is a list and watch of one node.
func (tn *twoNodes) nodeWatch(node string) *cache.ListWatch {
	sel := fields.OneTermEqualSelector("metadata.name", node).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return tn.c.Client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return tn.c.Client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
}

// waitNode waits (60 s at most), through a watch, until cond holds for the
// node, and returns when it saw it.
func (tn *twoNodes) waitNode(node, what string, cond func(*corev1.Node) bool) time.Time {
	tn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := watchtools.UntilWithSync(ctx, tn.nodeWatch(node), &corev1.Node{}, nil, func(ev watch.Event) (bool, error) {
		n, ok := ev.Object.(*corev1.Node)
		return ok && cond(n), nil
	})
	if err != nil {
		tn.t.Fatalf("node %s: no %s after 60s: %v", node, what, err)
	}
	return time.Now()
}

// untaintedAt watches node, tainted now, from now on, and returns a
// function that says the revision of the first write that took its mesh
// taint off (0: none yet).
func (tn *twoNodes) untaintedAt(node string) func() int64 {
	tn.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var rv int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = watchtools.UntilWithSync(ctx, tn.nodeWatch(node), &corev1.Node{}, nil, func(ev watch.Event) (bool, error) {
			n, ok := ev.Object.(*corev1.Node)
			if _, has := meshTaintIn(n); ok && !has {
				mu.Lock()
				rv = revision(tn.t, n.ResourceVersion)
				mu.Unlock()
				return true, nil
			}
			return false, nil
		})
	}()
	tn.t.Cleanup(func() { cancel(); <-done })
	return func() int64 { mu.Lock(); defer mu.Unlock(); return rv }
}

// revision is a resourceVersion as etcd's revision: kube-apiserver on
// etcd gives every write the store's revision, so two objects' versions
// order their writes (the tests' API server is on etcd).
func revision(t testing.TB, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q is not etcd's revision: %v", rv, err)
	}
	return n
}

// boundAt watches pod p (from its creation) and returns a function that
// says the revision at which it was first seen bound to a node (0: not
// yet).
func (tn *twoNodes) boundAt(p *corev1.Pod) func() int64 {
	tn.t.Helper()
	w, err := tn.c.Client.CoreV1().Pods(p.Namespace).Watch(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", p.Name).String(), ResourceVersion: p.ResourceVersion})
	if err != nil {
		tn.t.Fatal(err)
	}
	var mu sync.Mutex
	var rv int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if got, ok := ev.Object.(*corev1.Pod); ok && got.Spec.NodeName != "" {
				mu.Lock()
				rv = revision(tn.t, got.ResourceVersion)
				mu.Unlock()
				return
			}
		}
	}()
	tn.t.Cleanup(func() { w.Stop(); <-done })
	return func() int64 { mu.Lock(); defer mu.Unlock(); return rv }
}

// podOnNode is basePod in namespace ns, placed by the scheduler on node
// ("" anywhere).
func podOnNode(ns, name, node string) *corev1.Pod {
	p := basePod(name)
	p.Namespace = ns
	if node != "" {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	return p
}

// spread spreads pods labelled app=<app> over the nodes: hard (a pod
// that cannot be placed without skew waits) or only preferred.
func spread(p *corev1.Pod, app string, hard bool) *corev1.Pod {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["app"] = app
	when := corev1.ScheduleAnyway
	if hard {
		when = corev1.DoNotSchedule
	}
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
		WhenUnsatisfiable: when, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	return p
}

// sandboxRefusals are the events of pods whose sandbox or container a
// runtime hook refused.
func (tn *twoNodes) sandboxRefusals(namespaces ...string) []string {
	var out []string
	for _, ns := range namespaces {
		evs, err := tn.c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			tn.t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FailedCreatePodSandBox" || (ev.Type == corev1.EventTypeWarning && ev.Reason == "Failed") {
				out = append(out, fmt.Sprintf("%s/%s: %s %s", ns, ev.InvolvedObject.Name, ev.Reason, ev.Message))
			}
		}
	}
	return out
}

// enrolledBy waits until ztunnel zt got pod p's Add and the pod is
// annotated as redirected.
func (tn *twoNodes) enrolledBy(zt *zdstest.Ztunnel, p *corev1.Pod) {
	tn.t.Helper()
	waitFor(tn.t, "ztunnel's Add of pod "+p.Name, func() bool {
		return slices.ContainsFunc(zt.Requests(), func(r *zdstest.Request) bool { return r.Kind == zdstest.Add && r.UID == string(p.UID) })
	})
	waitPod(tn.t, tn.c, p, "annotated ambient.istio.io/redirection=enabled", func(p *corev1.Pod) bool {
		return p.Annotations["ambient.istio.io/redirection"] == "enabled"
	})
}

// nodeOf is the node the pod runs on.
func (tn *twoNodes) nodeOf(p *corev1.Pod) string {
	got, err := tn.c.Client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		tn.t.Fatal(err)
	}
	return got.Spec.NodeName
}

// metric is the value of a metric the meshlet on the node whose network
// namespace is netns exports (host network: the node's port 9881).
func (tn *twoNodes) metric(netns, name string) float64 {
	tn.t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return netnstest.Dial(ctx, netns, network, addr)
		}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://127.0.0.1:9881/metrics")
	if err != nil {
		tn.t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		tn.t.Fatal(err)
	}
	v, found := metricValue(string(page), name)
	if !found {
		tn.t.Fatalf("meshlet exports no %s", name)
	}
	return v
}

// durations summarises measured durations: p50 and max.
type durations []time.Duration

func (d durations) String() string {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %v, max %v (n=%d)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// TestTwoNodes: with two real kubelets and the real scheduler, the chart's
// node taint keeps mesh pods off a node whose mesh is not ready, and
// only them. Node B registers tainted; with ztunnel on node A only, mesh
// pods, by label and by resource, all land on A (the node taint, the DRA
// device's taint) while plain pods spread over both, and no runtime hook
// refuses any; ztunnel on B untaints it and mesh pods land there too. The
// taint follows ztunnel on B (its latency measured). Node B reboots
// (meshlet stopped first, as a node shutdown does; then its runtime,
// kubelet and pods killed, its mounts gone): no mesh pod is placed there
// until its mesh is ready again, and a pod created for B meanwhile runs
// once it is. An uninstall takes the taint off both nodes.
func TestTwoNodes(t *testing.T) {
	privtest.RequireRoot(t)
	tn := startTwoNodes(t, "e2e-2n")
	c := tn.c
	ctx := context.Background()
	if _, has := tn.meshTaintOf(nodeB); !has {
		t.Fatalf("node %s registered without %s (--register-with-taints)", nodeB, meshTaint)
	}
	meshNS, plainNS := "two-mesh", "two-plain"
	for ns, labels := range map[string]map[string]string{meshNS: ambient, plainNS: nil} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "namespace "+ns+"'s default service account", func() bool {
			_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		})
	}

	tn.r.install("e2e-2n", nil)
	meshlets := tn.meshletPods()
	ztA := tn.ztunnel(env.NodeName)
	tn.waitTaint(env.NodeName, false)
	tn.waitTaintValue(nodeB, "ztunnel-disconnected")

	// ztunnel on A only.
	var meshPods, plainPods []*corev1.Pod
	for i := range 4 {
		meshPods = append(meshPods, createPod(t, c, spread(podOnNode(meshNS, fmt.Sprintf("label-%d", i), ""), "by-label", false)))
	}
	for i := range 2 {
		p := meshPodByResource(fmt.Sprintf("resource-%d", i))
		p.Namespace = plainNS
		meshPods = append(meshPods, createPod(t, c, spread(p, "by-resource", false)))
	}
	for i := range 4 {
		plainPods = append(plainPods, createPod(t, c, spread(podOnNode(plainNS, fmt.Sprintf("plain-%d", i), ""), "plain", true)))
	}
	perNode := map[string]int{}
	for _, p := range append(slices.Clone(meshPods), plainPods...) {
		waitPod(t, c, p, "Running", running)
	}
	for _, p := range meshPods {
		if n := tn.nodeOf(p); n != env.NodeName {
			t.Errorf("mesh pod %s ran on %s, whose mesh is not ready", p.Name, n)
		}
		tn.enrolledBy(ztA, p)
	}
	for _, p := range plainPods {
		perNode[tn.nodeOf(p)]++
	}
	if perNode[env.NodeName] != 2 || perNode[nodeB] != 2 {
		t.Errorf("plain pods per node %v, want 2 on each: node %s's mesh taint must not keep them off", perNode, nodeB)
	}

	// ztunnel on B: the taint goes, mesh pods land there too.
	connected := time.Now()
	ztB := tn.ztunnel(nodeB)
	untainted := tn.waitTaint(nodeB, false)
	t.Logf("node %s: ztunnel connecting to the mesh taint removed: %v", nodeB, untainted.Sub(connected).Round(time.Millisecond))
	var onB []*corev1.Pod
	for i := range 2 {
		onB = append(onB, createPod(t, c, podOnNode(meshNS, fmt.Sprintf("on-b-%d", i), nodeB)))
	}
	for _, p := range onB {
		waitPod(t, c, p, "Running", running)
		tn.enrolledBy(ztB, p)
	}
	t.Logf("mesh pods for node %s Running %v after its ztunnel connected", nodeB, time.Since(connected).Round(time.Millisecond))

	// The taint follows ztunnel on B.
	var set, removed durations
	for range 10 {
		left := time.Now()
		ztB.Stop()
		set = append(set, tn.waitTaint(nodeB, true).Sub(left))
		// meshlet records what it wrote once the API server answered,
		// which may be after the watch told the test.
		waitFor(t, "meshlet_node_mesh_ready 0 on node "+nodeB+" without ztunnel", func() bool {
			return tn.metric(tn.b.NetnsPath(), "meshlet_node_mesh_ready") == 0
		})
		came := time.Now()
		ztB = tn.ztunnel(nodeB)
		removed = append(removed, tn.waitTaint(nodeB, false).Sub(came))
	}
	t.Logf("node %s mesh taint: set after ztunnel left %v; removed after ztunnel connected %v (ztunnel's connection and snapshot included)", nodeB, set, removed)
	waitFor(t, "meshlet_node_mesh_ready 1 on node "+nodeB+" with ztunnel", func() bool {
		return tn.metric(tn.b.NetnsPath(), "meshlet_node_mesh_ready") == 1
	})
	if v := tn.metric(tn.b.NetnsPath(), "meshlet_node_readiness_failing"); v != 0 {
		t.Errorf("node %s: meshlet_node_readiness_failing %v, want 0", nodeB, v)
	}
	if refused := tn.sandboxRefusals(meshNS, plainNS); len(refused) > 0 {
		t.Errorf("pods refused by a runtime hook:\n%s", strings.Join(refused, "\n"))
	}

	// Node B reboots: a shutdown stops meshlet (SIGTERM), which taints
	// the node; then the power goes.
	tn.node.StopKubelet()
	meshletB := meshlets[nodeB]
	ids, err := tn.b.Crictl("ps", "-q", "--label", "io.kubernetes.pod.uid="+string(meshletB.UID), "--name", "^meshlet$")
	if err != nil || ids == "" {
		t.Fatalf("meshlet's container on node %s: %q %v", nodeB, ids, err)
	}
	if _, err := tn.b.Crictl("stop", "--timeout", "30", ids); err != nil {
		t.Fatal(err)
	}
	if v, has := tn.meshTaintOf(nodeB); !has || v != "meshlet-stopped" {
		t.Errorf("node %s after meshlet stopped: mesh taint %q (present %v), want meshlet-stopped", nodeB, v, has)
	}
	untaintedRV := tn.untaintedAt(nodeB)
	ztB.Stop()
	if err := tn.b.PowerOff(); err != nil {
		t.Fatal(err)
	}
	tn.node.KillPods()
	if err := tn.mnt.Recreate(); err != nil {
		t.Fatal(err)
	}
	// Meanwhile, mesh pods: one for node B, one anywhere.
	created := time.Now()
	forB := createPod(t, c, podOnNode(meshNS, "during-reboot-b", nodeB))
	boundRV := tn.boundAt(forB)
	anywhere := createPod(t, c, podOnNode(meshNS, "during-reboot", ""))
	waitPod(t, c, anywhere, "Running", running)
	if n := tn.nodeOf(anywhere); n != env.NodeName {
		t.Errorf("mesh pod created during node %s's reboot ran on %s", nodeB, n)
	}
	tn.enrolledBy(ztA, anywhere)
	if err := tn.b.PowerOn(); err != nil {
		t.Fatal(err)
	}
	if err := tn.node.StartKubelet(); err != nil {
		t.Fatal(err)
	}
	ready, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := tn.node.WaitReady(ready); err != nil {
		t.Fatal(err)
	}
	booted := time.Now()
	// meshlet starts again (the same pod, a new sandbox); until ztunnel
	// is back the node stays tainted, and the pod for it is bound only
	// after the taint is gone (in etcd's order of writes).
	ztB = tn.ztunnel(nodeB)
	tn.waitTaint(nodeB, false)
	waitPod(t, c, forB, "Running", running)
	waitFor(t, "the revisions of the taint's removal and the pod's binding", func() bool { return untaintedRV() != 0 && boundRV() != 0 })
	if bound, untainted := boundRV(), untaintedRV(); bound <= untainted {
		t.Errorf("pod %s bound to node %s at revision %d, before its mesh taint went at %d", forB.Name, nodeB, bound, untainted)
	}
	tn.enrolledBy(ztB, forB)
	t.Logf("node %s reboot: the mesh pod created for it while it was down Running %v after its creation (%v after the kubelet was back)",
		nodeB, time.Since(created).Round(time.Millisecond), time.Since(booted).Round(time.Millisecond))
	// The pods bound to node B before it went down are the kubelet's to
	// start again, whatever the taint (it only keeps new pods off): they
	// are not checked here.
	for _, p := range []*corev1.Pod{forB, anywhere} {
		if refused := tn.sandboxRefusals(meshNS); slices.ContainsFunc(refused, func(r string) bool { return strings.HasPrefix(r, meshNS+"/"+p.Name+":") }) {
			t.Errorf("pod %s refused by a runtime hook: %v", p.Name, refused)
		}
	}

	// An update that turns the taint off: node B, tainted (no ztunnel),
	// loses the taint as its meshlet is replaced by one without it, and
	// the new one leaves it off.
	ztB.Stop()
	tn.waitTaint(nodeB, true)
	tn.r.mustHelm("upgrade", "meshlet", filepath.Join(moduleRoot(t), "deploy", "charts", "meshlet"), "-n", meshletNamespace,
		"-f", tn.r.values, "--set", "nodeReadiness.mode=off")
	tn.waitTaint(nodeB, false)
	tn.rolledOut()
	if v, has := tn.meshTaintOf(nodeB); has {
		t.Errorf("node %s, its meshlet updated to no taint: mesh taint %q", nodeB, v)
	}

	// Back to the taint: both nodes tainted (no ztunnel follows meshlet
	// here); an uninstall, which deletes meshlet's RBAC with its
	// DaemonSet, takes the taint off both.
	tn.r.mustHelm("upgrade", "meshlet", filepath.Join(moduleRoot(t), "deploy", "charts", "meshlet"), "-n", meshletNamespace,
		"-f", tn.r.values, "--set", "nodeReadiness.mode=taint")
	tn.rolledOut()
	tn.waitTaintValue(env.NodeName, "ztunnel-disconnected")
	tn.waitTaintValue(nodeB, "ztunnel-disconnected")
	tn.r.mustHelm("uninstall", "meshlet", "-n", meshletNamespace, "--cascade=foreground", "--wait")
	for _, n := range []string{env.NodeName, nodeB} {
		if v, has := tn.meshTaintOf(n); has {
			t.Errorf("node %s after the uninstall: mesh taint %q left", n, v)
		}
	}
}

// rolledOut waits until meshlet's DaemonSet runs its current template,
// Ready, on both nodes, and no other pod.
func (tn *twoNodes) rolledOut() {
	tn.t.Helper()
	waitForfWithin(tn.t, 3*time.Minute, func() (bool, string) {
		ds, err := tn.c.Client.AppsV1().DaemonSets(meshletNamespace).Get(context.Background(), "meshlet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := ds.Status
		return st.ObservedGeneration == ds.Generation && st.UpdatedNumberScheduled == 2 && st.NumberAvailable == 2 && st.CurrentNumberScheduled == 2,
			fmt.Sprintf("%+v", st)
	}, func() string { return "meshlet's DaemonSet rolled out on both nodes" })
}
