package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// meshletNamespace is where the chart is installed in the tests.
const meshletNamespace = "meshlet-system"

// meshletPods selects the DaemonSet's pods (not the chart's pre-delete
// job's).
var meshletPods = metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshlet"}

// release is meshlet installed with Helm on the test cluster.
type release struct {
	t          testing.TB
	c          *clusterenv.Cluster
	env        *env.Env // the node's runtime
	helm       string
	kubeconfig string
	values     string
	// chartValues are more values, over install's.
	chartValues map[string]any
	dir         string // the release's files on the node
	zt          string // ztunnel's socket on the node
	stateDir    string
}

// helmCmd runs helm against the cluster (inside the node's netns, where
// the API server listens).
func (r *release) helmCmd(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + r.env.NetnsPath(), r.helm,
		"--kubeconfig", r.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (r *release) mustHelm(args ...string) {
	r.t.Helper()
	if out, err := r.helmCmd(args...); err != nil {
		r.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// oldMeshletLeaving reports whether the DaemonSet's pod of the old image
// is being deleted: the handover to the new one is under way.
func oldMeshletLeaving(t *testing.T, c *clusterenv.Cluster, old string) bool {
	pods, err := c.Client.CoreV1().Pods(meshletNamespace).List(t.Context(), meshletPods)
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if strings.HasSuffix(p.Spec.Containers[0].Image, ":"+old) && p.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

// buildImage builds meshlet's image at version and imports it into the
// node's runtime, as an operator without a registry would. Only for this
// node's architecture: the image's other one is hack/mkimage's to test.
func buildImage(t testing.TB, version string) {
	t.Helper()
	buildImageWith(t, version, false)
}

// buildImageWith is buildImage, with Debian's iptables in the image as in
// a release (hack/mkimage fetches and caches the packages) when iptables.
func buildImageWith(t testing.TB, version string, iptables bool) {
	t.Helper()
	buildImageInto(t, theEnv(t), version, iptables)
}

// buildImageInto is buildImageWith into the runtime of environment e.
func buildImageInto(t testing.TB, e *env.Env, version string, iptables bool) {
	t.Helper()
	importImage(t, buildImageTar(t, version, iptables), version, e)
}

// importImage imports meshlet's image, an OCI archive, as version into
// the runtimes of envs.
func importImage(t testing.TB, tar, version string, envs ...*env.Env) {
	t.Helper()
	for _, e := range envs {
		if err := e.ImportImage(tar, "localhost/meshlet/meshlet:"+version); err != nil {
			t.Fatalf("import image %s: %v", version, err)
		}
	}
}

// buildImageTar builds meshlet's image at version as an OCI archive (for
// this node's architecture only) and returns its path.
func buildImageTar(t testing.TB, version string, iptables bool) string {
	t.Helper()
	tar := filepath.Join(t.TempDir(), "meshlet-image.tar")
	cmd := exec.Command("go", "run", "./hack/mkimage", "-o", tar, "-version", version, fmt.Sprintf("-iptables=%v", iptables), "-platforms", "linux/"+runtime.GOARCH)
	cmd.Dir = moduleRoot(t)
	unlock, err := privtest.LockBuilds()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	unlock()
	if err != nil {
		t.Fatalf("build image %s: %v\n%s", version, err, out)
	}
	return tar
}

func moduleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// installMeshlet installs the chart with the node's paths (the test
// runtime and kubelet live under temp dirs, not at the defaults).
func installMeshlet(t testing.TB, c *clusterenv.Cluster, tag string, config map[string]any) *release {
	t.Helper()
	r := newRelease(t, c)
	r.install(tag, config)
	return r
}

// newRelease picks the node's paths for a release of meshlet not yet
// installed: ztunnel's socket (which another node agent may serve
// first), the state directory.
func newRelease(t testing.TB, c *clusterenv.Cluster) *release {
	t.Helper()
	return newReleaseOn(t, c, theEnv(t))
}

// newReleaseOn is newRelease on a node whose runtime is environment e's.
func newReleaseOn(t testing.TB, c *clusterenv.Cluster, e *env.Env) *release {
	t.Helper()
	helmDir := privtest.RequireEnv(t, "MESHLET_HELM", "the directory hack/install-helm.sh prints (`make test` sets it)")
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mlds") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &release{t: t, c: c, env: e, helm: filepath.Join(helmDir, "helm"), kubeconfig: kubeconfig, dir: dir,
		zt: filepath.Join(dir, "ztunnel", "ztunnel.sock"), stateDir: filepath.Join(dir, "state")}
}

// install installs the chart at image tag with config's flags.
func (r *release) install(tag string, config map[string]any) {
	t, e, dir := r.t, r.env, r.dir
	t.Helper()
	netnsDir, err := e.NetnsDir()
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"v": 2, "mode": "nri"}
	for k, v := range config {
		cfg[k] = v
	}
	values := map[string]any{
		"image": map[string]any{"repository": "localhost/meshlet/meshlet", "tag": tag, "pullPolicy": "Never"},
		"paths": map[string]any{
			"nriSocket": e.NRISocket, "criSocket": e.CRISocket, "cniConfDir": e.CNIConfDir(), "cniBinDir": e.CNIBinDir(),
			"kubeletDir": r.c.KubeletRootDir(), "ztunnelSocket": r.zt, "cniSocket": filepath.Join(dir, "cni", "cni.sock"),
			"netnsDir": netnsDir, "stateDir": r.stateDir, "xtablesLock": filepath.Join(dir, "xtables.lock"),
			"cdiSpecDir": e.CDISpecDir(), "gateHookDir": e.GateHookDir(), "gateSocket": filepath.Join(dir, "gate", "gate.sock"),
		},
		"config": cfg,
		// The test runtime has NRI on: the check passes and says so.
		"nriCheck": map[string]any{"enabled": true},
		// The cluster has no kube-proxy, so the kubernetes Service's IP
		// leads nowhere: meshlet (host network) reaches the API server
		// where it listens, in the node's netns.
		"extraEnv": []map[string]any{{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}, {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}},
	}
	maps.Copy(values, r.chartValues)
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	r.values = filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(r.values, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r.mustHelm("install", "meshlet", filepath.Join(moduleRoot(t), "deploy", "charts", "meshlet"),
		"-n", meshletNamespace, "--create-namespace", "-f", r.values)
	t.Cleanup(func() {
		if _, err := r.helmCmd("status", "meshlet", "-n", meshletNamespace); err == nil {
			_, _ = r.helmCmd("uninstall", "meshlet", "-n", meshletNamespace, "--cascade=foreground", "--wait")
		}
	})
}

// waitRolledOut waits until the DaemonSet's pod on the node runs image tag
// and is Ready.
func (r *release) waitRolledOut(tag string) *corev1.Pod {
	r.t.Helper()
	var ready *corev1.Pod
	// Three minutes: the old pod goes only once the kubelet has torn it
	// down, behind the update's churn of mesh pods, which on a loaded
	// 2-core CI machine took longer than a minute.
	waitForfWithin(r.t, 3*time.Minute, func() (bool, string) {
		pods, err := r.c.Client.CoreV1().Pods(meshletNamespace).List(context.Background(), meshletPods)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for i, p := range pods.Items {
			why := ""
			for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if w := cs.State.Waiting; w != nil {
					why += fmt.Sprintf(" %s: %s %s", cs.Name, w.Reason, w.Message)
				}
			}
			for _, c := range p.Status.Conditions {
				if c.Status != corev1.ConditionTrue && c.Message != "" {
					why += fmt.Sprintf(" %s: %s", c.Type, c.Message)
				}
			}
			if evs, err := r.c.Client.CoreV1().Events(meshletNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name}); err == nil {
				for _, ev := range evs.Items {
					if ev.Type == corev1.EventTypeWarning {
						why += fmt.Sprintf(" event %s: %s", ev.Reason, ev.Message)
					}
				}
			}
			if log := strings.TrimSpace(podLog(r.t, &p, "meshlet")); log != "" {
				lines := strings.Split(log, "\n")
				why += "\n  log: " + strings.Join(lines[max(0, len(lines)-15):], "\n  log: ")
			}
			seen = append(seen, fmt.Sprintf("%s %s %s%s", p.Name, p.Spec.Containers[0].Image, p.Status.Phase, why))
			if len(pods.Items) == 1 && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag) && podReady(&p) {
				ready = &pods.Items[i]
				return true, ""
			}
		}
		return false, strings.Join(seen, "; ")
	}, func() string { return "meshlet's pod at " + tag + " Running and Ready" })
	return ready
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

// connectZtunnel connects a ztunnel stand-in to the socket the DaemonSet's
// meshlet serves on the node.
func (r *release) connectZtunnel() *mesh {
	r.t.Helper()
	zt := &zdstest.Ztunnel{}
	waitFor(r.t, "the ztunnel stand-in connected to meshlet's socket", func() bool { return zt.Start(r.zt) == nil })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := zt.WaitSnapshot(ctx); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(zt.Stop)
	return &mesh{t: r.t, env: r.env, socket: r.zt, zt: zt}
}

// ambientPod creates a pod in a namespace labelled for the mesh.
func ambientPod(t *testing.T, c *clusterenv.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	p := basePod(name)
	p.Namespace = ns
	return createPod(t, c, p)
}

// TestDaemonSetOnKubelet: meshlet installed with its Helm chart runs as a
// DaemonSet on a real kubelet, from an image built without Docker and
// imported into the node's containerd; it enrolls mesh pods, by label and
// by resource; a chart upgrade rolls it with a surge (the new meshlet
// waits Ready next to the old one) while mesh pods keep being created, and
// none of them starts unmeshed; an uninstall leaves the node clean of
// meshlet's own state while running pods keep their rules, and with
// unmesh-on-uninstall releases them first.
func TestDaemonSetOnKubelet(t *testing.T) {
	c := startClusterWith(t, clusterenv.Options{APIServerArgs: []string{"--admission-control-config-file=" + hardenedAdmission(t)}})
	refusedByHardenedCluster(t, c)
	buildImage(t, "e2e-1")
	buildImage(t, "e2e-2")
	ctx := context.Background()
	ns := "ds-mesh"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ambient}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace's default service account", func() bool {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	// The answers to the hardened cluster: the namespace, made and
	// labelled as deploy/README.md says (Helm keeps its release in it, so
	// it exists first), enforces privileged; the chart's quota admits its
	// critical pods. A node label selects the nodes meshlet runs on.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: meshletNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setNodeLabel(t, c, meshletNodeLabel, "true")
	hardened := map[string]any{
		"resourceQuota": map[string]any{"enabled": true},
		"nodeSelector":  map[string]any{"kubernetes.io/os": "linux", meshletNodeLabel: "true"},
	}
	start := time.Now()
	r := newRelease(t, c)
	r.chartValues = hardened
	r.install("e2e-1", nil)
	installed := r.waitRolledOut("e2e-1")
	t.Logf("helm install to meshlet's pod Ready: %v", time.Since(start).Round(10*time.Millisecond))
	if log := podLog(t, installed, "check-nri"); !strings.Contains(log, "NRI is enabled: the runtime answers on") {
		t.Errorf("the check-nri init container's log: %q, want it to say NRI is enabled", log)
	}
	// ztunnel follows meshlet across updates, as the real one does.
	zt := followZtunnel(t, r.zt)
	m := zt.current()

	first := ambientPod(t, c, ns, "first")
	waitPod(t, c, first, "Running", running)
	checkEnrolled(t, m, first, true)
	waitPod(t, c, first, "annotated ambient.istio.io/redirection=enabled", func(p *corev1.Pod) bool {
		return p.Annotations["ambient.istio.io/redirection"] == "enabled"
	})
	// By resource: the chart's DeviceClass, the DaemonSet's DRA plugin.
	byResource := meshPodByResource("by-resource")
	byResource.Namespace = ns
	byResource = createPod(t, c, byResource)
	waitPod(t, c, byResource, "Running", running)
	checkEnrolled(t, m, byResource, true)

	// Upgrade to the second build while mesh pods, by label and by
	// resource, keep coming. The update is a surge: the new meshlet is
	// Ready (a standby on the node lock, its DRA plugin registered) while
	// the old one still runs, and takes over when the old one exits.
	surge := watchSurge(t, c, "e2e-1", "e2e-2")
	var created []*corev1.Pod
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Pods every 3 s until the old meshlet is being deleted, then every
	// 300 ms through the handover; at most waitingPods and handoverPods of
	// each, so that a slow update (a loaded machine) never fills the
	// kubelet's 110 pods.
	const waitingPods, handoverPods = 30, 50
	wg.Go(func() {
		waiting, handover := 0, 0
		for i := 0; handover < handoverPods; i++ {
			during := oldMeshletLeaving(t, c, "e2e-1")
			every := 3 * time.Second
			if during || i == 0 {
				every = 300 * time.Millisecond
			}
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			if during {
				handover++
			} else if waiting++; waiting > waitingPods {
				continue
			}
			p := basePod(fmt.Sprintf("during-%d", i))
			if i%2 == 1 {
				p = meshPodByResource(fmt.Sprintf("during-%d", i))
			}
			p.Namespace = ns
			p = createPod(t, c, p)
			mu.Lock()
			created = append(created, p)
			mu.Unlock()
		}
	})
	r.mustHelm("upgrade", "meshlet", filepath.Join(moduleRoot(t), "deploy", "charts", "meshlet"), "-n", meshletNamespace,
		"-f", r.values, "--set", "image.tag=e2e-2")
	updated := r.waitRolledOut("e2e-2")
	close(stop)
	wg.Wait()
	if why := surge(); why != "" {
		t.Fatalf("the update was not a surge: %s", why)
	}
	// Its Ready came from the standby: it checked it could take over while
	// the old meshlet held the node, then took the node when it exited.
	for _, line := range []string{"Standby: ready to take the node over", "Node lock acquired: the previous meshlet exited"} {
		if log := podLog(t, updated, "meshlet"); !strings.Contains(log, line) {
			t.Errorf("the new meshlet's log lacks %q:\n%s", line, log)
		}
	}
	m = zt.current()
	if len(created) == 0 {
		t.Fatal("no pod was created during the upgrade")
	}
	// Every pod is enrolled (one Add in the new meshlet's replay), and its
	// app container started only after ztunnel had it: no mesh pod ran
	// unmeshed across the update.
	for _, p := range append(created, first, byResource) {
		waitPod(t, c, p, "Running", running)
		checkEnrolled(t, m, p, true)
		added, started := zt.firstAdd(string(p.UID)), appStarted(t, p)
		if added.IsZero() || !added.Before(started) {
			t.Errorf("pod %s: app container started at %s, ztunnel's first Add at %s: it ran unmeshed", p.Name,
				started.Format(time.RFC3339Nano), added.Format(time.RFC3339Nano))
		}
	}
	if rep := zt.repeatedAdds(); len(rep) > 0 {
		t.Errorf("ztunnel got more than one Add for a pod from one meshlet: %v", rep)
	}
	// ztunnel kept proxying every mesh pod across the update: none was
	// drained or restarted, and meshlet broke no protocol rule.
	var meshUIDs []string
	for _, p := range append(created, first, byResource) {
		meshUIDs = append(meshUIDs, string(p.UID))
	}
	if d := zt.ztunnel().Disruptions(meshUIDs...); len(d) > 0 {
		t.Errorf("the update disrupted mesh pods at ztunnel:\n%s", strings.Join(d, "\n"))
	}
	if v := zt.ztunnel().Violations(); len(v) > 0 {
		t.Errorf("meshlet broke ztunnel's protocol during the update: %q", v)
	}
	t.Logf("%d mesh pods created during the upgrade (by label and by resource), each enrolled before its app container started; ztunnel without a meshlet for %v",
		len(created), zt.handoverGaps())
	zt.close()

	// The node leaves the DaemonSet: relabelled out of its node selector,
	// the DaemonSet controller deletes meshlet's pod and starts none, and
	// meshlet takes its state off the node as on an uninstall; running
	// pods keep their redirection.
	setNodeLabel(t, c, meshletNodeLabel, "false")
	waitFor(t, "meshlet's pod gone from the relabelled node", func() bool {
		pods, err := c.Client.CoreV1().Pods(meshletNamespace).List(ctx, meshletPods)
		return err == nil && len(pods.Items) == 0
	})
	r.nodeClean("the node's leaving the DaemonSet")
	if !hasPodRules(t, first) {
		t.Fatal("a running mesh pod lost its rules when the node left the DaemonSet")
	}
	setNodeLabel(t, c, meshletNodeLabel, "true")
	r.waitRolledOut("e2e-2")

	// Uninstall: the node is clean of meshlet's state; running pods keep
	// their rules.
	// The documented uninstall: it returns once meshlet's pods are gone.
	r.mustHelm("uninstall", "meshlet", "-n", meshletNamespace, "--cascade=foreground", "--wait")
	if pods, err := c.Client.CoreV1().Pods(meshletNamespace).List(ctx, meshletPods); err != nil || len(pods.Items) != 0 {
		t.Fatalf("helm uninstall --cascade=foreground --wait returned with meshlet's pods %v (%v)", pods, err)
	}
	r.nodeClean("the uninstall")
	if !hasPodRules(t, first) {
		t.Fatal("a running mesh pod lost its rules on uninstall")
	}

	// With unmesh-on-uninstall, every pod is released first.
	r = newRelease(t, c)
	r.chartValues = hardened
	r.install("e2e-2", map[string]any{"unmesh-on-uninstall": true})
	r.waitRolledOut("e2e-2")
	m = r.connectZtunnel()
	m.waitFor("the running pod replayed", func([]*zdstest.Request) bool { return len(m.adds(string(first.UID))) > 0 })
	r.mustHelm("uninstall", "meshlet", "-n", meshletNamespace, "--cascade=foreground", "--wait")
	m.waitFor("a Del for the running pod", func(rs []*zdstest.Request) bool { return hasDel(rs, string(first.UID)) })
	if hasPodRules(t, first) {
		t.Fatal("unmesh-on-uninstall left the pod's rules")
	}
}

// nodeClean asserts that meshlet left none of its own state on the node
// (after what): its node table, its state files, ztunnel's socket. The
// ResourceSlices go too: meshlet deletes its node's slice when it can; on
// an uninstall Helm deletes meshlet's RBAC a moment after its DaemonSet,
// so the kubelet, which wipes the slices of a driver whose plugin is gone
// (after 30 s), may be the one.
func (r *release) nodeClean(after string) {
	t := r.t
	t.Helper()
	if out, err := r.env.Exec("nft", "list", "table", "inet", "meshlet"); err == nil {
		t.Fatalf("the node's table inet meshlet outlived %s:\n%s", after, out)
	}
	for _, f := range []string{"checkpoint.json", "claims.json", "debug.sock"} {
		if _, err := os.Stat(filepath.Join(r.stateDir, f)); !os.IsNotExist(err) {
			t.Fatalf("%s outlived %s: %v", f, after, err)
		}
	}
	if _, err := os.Stat(r.zt); !os.IsNotExist(err) {
		t.Fatalf("ztunnel's socket outlived %s: %v", after, err)
	}
	waitFor(t, "no mesh ResourceSlice left after "+after, func() bool {
		slices, err := r.c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		return err == nil && len(slices.Items) == 0
	})
	node, err := r.c.Client.CoreV1().Nodes().Get(context.Background(), env.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == meshTaint {
			t.Fatalf("the node's mesh taint outlived %s: %+v", after, taint)
		}
	}
}

// meshletNodeLabel selects, in TestDaemonSetOnKubelet, the nodes meshlet
// runs on (its chart's nodeSelector).
const meshletNodeLabel = "example.com/meshlet"

// setNodeLabel sets the label key=value on the cluster's node.
func setNodeLabel(t testing.TB, c *clusterenv.Cluster, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), env.NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hardenedAdmission writes the API server's admission configuration of a
// hardened managed cluster (GKE's kind): Pod Security enforces baseline
// where a namespace says nothing, and pods of the node- and
// cluster-critical priority classes are admitted only in a namespace with
// a ResourceQuota covering them. It returns the file's path.
func hardenedAdmission(t testing.TB) string {
	t.Helper()
	const config = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ResourceQuota
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: ResourceQuotaConfiguration
      limitedResources:
        - resource: pods
          matchScopes:
            - scopeName: PriorityClass
              operator: In
              values: [system-node-critical, system-cluster-critical]
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults: {enforce: baseline, enforce-version: latest, warn: baseline, warn-version: latest, audit: baseline, audit-version: latest}
      exemptions: {usernames: [], runtimeClasses: [], namespaces: []}
`
	f := filepath.Join(t.TempDir(), "admission.yaml")
	if err := os.WriteFile(f, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// refusedByHardenedCluster asserts the premise of the hardened cluster:
// in a namespace without labels or quota, a pod of the node-critical
// class and a host-network pod are both refused at admission.
func refusedByHardenedCluster(t *testing.T, c *clusterenv.Cluster) {
	t.Helper()
	ctx := context.Background()
	ns := "hardened-check"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	critical := basePod("critical")
	critical.Namespace, critical.Spec.PriorityClassName = ns, "system-node-critical"
	host := basePod("host")
	host.Namespace, host.Spec.HostNetwork = ns, true
	for _, c2 := range []struct {
		pod  *corev1.Pod
		want string
	}{{critical, "insufficient quota to match these scopes"}, {host, `violates PodSecurity "baseline:latest"`}} {
		_, err := c.Client.CoreV1().Pods(ns).Create(ctx, c2.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Fatalf("pod %s in a namespace without labels or quota: %v; want it refused (%s)", c2.pod.Name, err, c2.want)
		}
	}
}

// watchSurge watches meshlet's pods through an update from tag old to
// tag next. The returned func says what was wrong ("" for a surge): the
// first time a new pod is Ready, an old one must be running and not yet
// being deleted. It waits for that moment (the rollout's end seen on the
// DaemonSet can reach the test before the pod's own event does), then
// stops watching.
func watchSurge(t *testing.T, c *clusterenv.Cluster, old, next string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pods := c.Client.CoreV1().Pods(meshletNamespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A RetryWatcher resumes from the last event it delivered when the
	// API server ends a watch: no pod event is lost.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan string, 1)
	go func() {
		defer w.Stop()
		byName := map[string]*corev1.Pod{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(byName, p.Name)
				continue
			}
			byName[p.Name] = p
			if !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+next) || !podReady(p) {
				continue
			}
			for _, o := range byName {
				if strings.HasSuffix(o.Spec.Containers[0].Image, ":"+old) && o.DeletionTimestamp == nil && o.Status.Phase == corev1.PodRunning {
					result <- ""
					return
				}
			}
			result <- "the new pod " + p.Name + " became Ready with no old pod running next to it"
			return
		}
		result <- "the watch ended before a new pod became Ready"
	}()
	return func() string {
		defer cancel()
		select {
		case why := <-result:
			return why
		case <-time.After(30 * time.Second):
			return "no new pod became Ready within 30 s of the rollout's end"
		}
	}
}

// podLog is the kubelet's log of one of the pod's containers.
func podLog(t testing.TB, p *corev1.Pod, container string) string {
	t.Helper()
	return podLogIn(t, "/var/log/pods", p, container)
}

// podLogIn is podLog on a node whose kubelet keeps pods' logs in dir.
func podLogIn(t testing.TB, dir string, p *corev1.Pod, container string) string {
	t.Helper()
	logs, _ := filepath.Glob(fmt.Sprintf("%s/%s_%s_%s/%s/*.log", dir, p.Namespace, p.Name, p.UID, container))
	var all strings.Builder
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	return all.String()
}

// appStarted is when the pod's app container first started, as the
// runtime recorded it (nanoseconds). An attempt the runtime created but
// never started (refused while meshlet changed hands, then retried by the
// kubelet) does not count.
func appStarted(t testing.TB, p *corev1.Pod) time.Time {
	t.Helper()
	ids, err := theEnv(t).Crictl("ps", "-a", "-q", "--label", "io.kubernetes.pod.uid="+string(p.UID), "--name", "^app$")
	if err != nil || ids == "" {
		t.Fatalf("app container of pod %s: %q %v", p.Name, ids, err)
	}
	var first time.Time
	for _, id := range strings.Fields(ids) {
		if at := containerStarted(t, id); !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// containerStarted is when the runtime started container id (zero: never).
func containerStarted(t testing.TB, id string) time.Time {
	t.Helper()
	at, err := theEnv(t).ContainerStarted(id)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// hasPodRules is whether the pod's sandbox netns holds meshlet's table.
func hasPodRules(t *testing.T, p *corev1.Pod) bool {
	t.Helper()
	_, netns := podSandbox(t, p)
	return hasRules(t, netns)
}
