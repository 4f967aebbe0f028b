package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/draplugin/claimstore"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// draNamespace holds the DRA tests' pods. It is not labelled for the mesh:
// only their claims select them.
const draNamespace = "apps"

// TestDRA: on a real single-node cluster, pods ask for the mesh with the
// extended resource or a claim template and are prepared by meshlet's
// kubelet plugin before their sandbox, enrolled with the claim's settings
// and reported in the claim's status; an invalid MeshConfig is refused with
// its field's path; the device is tainted while ztunnel is down, so a mesh
// pod stays Pending until it is back; a meshlet killed between Prepare and
// the pod's sandbox loses nothing; deleted pods' claims are unprepared.
func TestDRA(t *testing.T) {
	c := startCluster(t, nil)
	ctx := context.Background()
	applyManifest(t, c, "../../deploy/dra.yaml", "DeviceClass")
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	// Claims a run before this one left prepared (its kubelet is gone,
	// so nothing unprepares them): the counts below are on top.
	staleClaims := preparedClaims(t).Len()
	m := startMesh(t, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+c.KubeletRootDir())
	// Cleanups run last-registered first: pods go while the plugin can
	// still unprepare their claims.
	t.Cleanup(func() {
		if err := c.DeletePods(); err != nil {
			t.Errorf("delete pods: %v", err)
		}
	})
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: draNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDeviceTaint(t, c, false)
	template := exampleTemplate(t)
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(draNamespace).Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// By extended resource: the scheduler makes the claim; the node's
	// defaults apply (DNS captured).
	byResource := createPod(t, c, meshPodByResource("by-resource"))
	waitPod(t, c, byResource, "Running", running)
	checkEnrolled(t, m, byResource, true)
	byResource = getPod(t, c, byResource)
	if byResource.Status.ExtendedResourceClaimStatus == nil {
		t.Fatal("no extendedResourceClaimStatus on the pod asking for the extended resource")
	}
	waitClaimEnrolled(t, c, byResource.Status.ExtendedResourceClaimStatus.ResourceClaimName, byResource)

	// By claim template with dnsCapture: false.
	byClaim := createPod(t, c, meshPodByClaim("by-claim", template.Name))
	waitPod(t, c, byClaim, "Running", running)
	checkEnrolled(t, m, byClaim, false)
	waitClaimEnrolled(t, c, claimOf(t, c, byClaim), byClaim)

	// An invalid MeshConfig: refused in Prepare with the field's path,
	// nothing stored; the pod does not start.
	bad := template.DeepCopy()
	bad.Name = "mesh-bad"
	bad.Spec.Spec.Devices.Config[0].Opaque.Parameters = runtime.RawExtension{Raw: []byte(`{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig","dnsCapture":"no"}`)}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(draNamespace).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := createPod(t, c, meshPodByClaim("refused", bad.Name))
	waitEvent(t, c, refused, "spec.devices.config[0].opaque.parameters.dnsCapture")
	if p := getPod(t, c, refused); p.Status.Phase == corev1.PodRunning {
		t.Fatal("the pod with an invalid MeshConfig runs")
	}
	if claims := preparedClaims(t); len(claims.ForPod(string(refused.UID))) != 0 {
		t.Fatal("the refused claim was stored")
	}
	_, metrics, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for name, ok := range map[string]func(float64) bool{
		"meshlet_dra_prepare_refusals_total": func(v float64) bool { return v >= 1 }, // the kubelet retries
		"meshlet_mesh_device_ready":          func(v float64) bool { return v == 1 },
		"meshlet_dra_prepared_claims":        func(v float64) bool { return v == float64(2+staleClaims) },
	} {
		if v, found := metricValue(metrics, name); !found || !ok(v) {
			t.Errorf("metric %s = %v (found %t)", name, v, found)
		}
	}
	if err := c.Client.CoreV1().Pods(draNamespace).Delete(ctx, refused.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Deleting a pod unprepares its claim.
	claimsBefore := preparedClaims(t).ForPod(string(byClaim.UID))
	if len(claimsBefore) != 1 {
		t.Fatalf("prepared claims of the running pod: %+v, want 1", claimsBefore)
	}
	if err := c.Client.CoreV1().Pods(draNamespace).Delete(ctx, byClaim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod's claim unprepared", func() bool { return !preparedClaims(t).Claimed(string(byClaim.UID)) })

	// ztunnel gone: the device is tainted and a new mesh pod stays Pending,
	// with the scheduler saying why; ztunnel back: it runs, enrolled.
	start := time.Now()
	m.zt.Stop()
	m.zt = nil
	waitDeviceTaint(t, c, true)
	t.Logf("device tainted %v after ztunnel left", time.Since(start).Round(time.Millisecond))
	pending := createPod(t, c, meshPodByResource("pending"))
	waitPod(t, c, pending, "Unschedulable", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("scheduler: %s", cond.Message)
				return true
			}
		}
		return false
	})
	start = time.Now()
	m.connectZtunnel()
	waitDeviceTaint(t, c, false)
	t.Logf("device untainted %v after ztunnel connected", time.Since(start).Round(time.Millisecond))
	waitPod(t, c, pending, "Running once the mesh is ready", running)
	checkEnrolled(t, m, pending, true)

	// meshlet killed between Prepare and the pod's sandbox. The claim
	// tolerates the taint, so with ztunnel down the pod is scheduled and
	// prepared, but its sandbox is refused (no ztunnel to hand it to) and
	// retried by the kubelet; meshlet dies meanwhile, a new one starts, and
	// the retried sandbox is enrolled with the stored settings: the kubelet
	// does not prepare the claim again.
	tolerant := template.DeepCopy()
	tolerant.Name = "mesh-tolerant"
	tolerant.Spec.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{
		Key: draplugin.TaintKey(draplugin.DefaultDriverName), Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(draNamespace).Create(ctx, tolerant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.zt.Stop()
	m.zt = nil
	waitDeviceTaint(t, c, true)
	restarted := createPod(t, c, meshPodByClaim("restarted", tolerant.Name))
	waitFor(t, "the tolerant pod's claim prepared", func() bool { return preparedClaims(t).Claimed(string(restarted.UID)) })
	waitEvent(t, c, restarted, "ztunnel")
	if err := m.meshlet.Kill(); err != nil {
		t.Fatal(err)
	}
	logBefore, err := os.ReadFile(m.meshlet.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	m.startMeshlet()
	m.connectZtunnel()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The restarted plugin reuses the killed one's socket names, so the
	// kubelet unregisters the old and registers the new in two passes of
	// its plugin watcher; a claim it tries to prepare in between fails as
	// "not registered" and is retried only on its next periodic pod sync
	// (a minute). A user's pod meets that window too; the test waits it
	// out so the next steps exercise meshlet, not the kubelet's retry.
	waitMeshletLog(t, m.meshlet, len(logBefore), kubeletRegistered)
	waitPod(t, c, restarted, "Running after meshlet's restart", running)
	checkEnrolled(t, m, restarted, false)
	logAll, err := os.ReadFile(m.meshlet.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logAll[len(logBefore):]), "Mesh claim prepared") {
		t.Fatal("the restarted meshlet prepared a claim again: the test did not exercise the stored claim")
	}

	// An update: a second meshlet (another pod UID) starts while the first
	// serves. It waits on the node lock and touches neither the runtime
	// hook nor ztunnel's socket, so a pod created during the overlap is
	// prepared and enrolled by the first; when the first exits, the second
	// takes over both and the DRA plugin.
	first := m.meshlet
	second, err := theEnv(t).StartMeshlet(m.socket, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+c.KubeletRootDir(), "--pod-uid=meshlet-next")
	if err != nil {
		t.Fatal(err)
	}
	// When the test fails before the hand-over; after it, second is
	// m.meshlet, stopped by startMesh's cleanup once the pods are gone.
	t.Cleanup(func() {
		if m.meshlet != second {
			_ = second.Stop()
		}
	})
	waitMeshletLog(t, second, len(logAll), "Another meshlet serves this node")
	// With its own socket names the second plugin registers beside the
	// first and, being the newest, is sent the overlap pod's claim.
	waitMeshletLog(t, second, len(logAll), kubeletRegistered)
	overlap := createPod(t, c, meshPodByResource("overlap"))
	waitPod(t, c, overlap, "Running during the overlap", running)
	checkEnrolled(t, m, overlap, true)
	if err := first.Stop(); err != nil {
		t.Fatalf("first meshlet: %v", err)
	}
	m.meshlet = second
	m.zt.Stop()
	m.connectZtunnel()
	if err := second.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	after := createPod(t, c, meshPodByResource("after"))
	waitPod(t, c, after, "Running after the update", running)
	checkEnrolled(t, m, after, true)

	// A stopping meshlet taints the device before it goes, and has the API
	// server confirm it: no mesh pod is scheduled while none serves the
	// node. (Pods go first, so their claims are unprepared.)
	if err := c.DeletePods(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the kubelet unpreparing the deleted pods' claims", func() bool { return preparedClaims(t).Len() == staleClaims })
	if err := m.meshlet.Stop(); err != nil {
		t.Fatal(err)
	}
	slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 1 || len(slices.Items[0].Spec.Devices) != 1 || len(slices.Items[0].Spec.Devices[0].Taints) != 1 ||
		slices.Items[0].Spec.Devices[0].Taints[0].Value != "meshlet-stopped" {
		t.Fatalf("after meshlet stopped, the node's slices are %s, want the mesh device tainted meshlet-stopped", toYAML(slices.Items))
	}
}

// kubeletRegistered is what a meshlet logs once the kubelet has
// registered its DRA plugin.
const kubeletRegistered = "The kubelet watches the mesh device's health"

// waitMeshletLog waits for a line containing text that this meshlet
// process wrote to its log (meshlets of one environment share the file;
// klog's header names the writer's pid) after offset from.
func waitMeshletLog(t testing.TB, ml *env.Meshlet, from int, text string) {
	t.Helper()
	pid := fmt.Sprintf(" %d ", ml.Pid())
	waitFor(t, fmt.Sprintf("meshlet %d to log %q", ml.Pid(), text), func() bool {
		b, _ := os.ReadFile(ml.LogPath)
		if len(b) < from {
			return false
		}
		for _, line := range strings.Split(string(b[from:]), "\n") {
			if head, _, ok := strings.Cut(line, "]"); ok && strings.Contains(head, pid) && strings.Contains(line, text) {
				return true
			}
		}
		return false
	})
}

// running: the pod runs with its container ready.
func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
}

// applyManifest creates the objects of one kind from a manifest file.
func applyManifest(t testing.TB, c *clusterenv.Cluster, file, kind string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if tm.Kind != kind {
			continue
		}
		switch kind {
		case "DeviceClass":
			var o resourceapi.DeviceClass
			if err := yaml.UnmarshalStrict([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(context.Background(), &o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		default:
			t.Fatalf("applyManifest: kind %s not supported", kind)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("no %s in %s", kind, file)
	}
}

// exampleTemplate is the ResourceClaimTemplate users copy from
// deploy/examples (dnsCapture: false).
func exampleTemplate(t testing.TB) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	data, err := os.ReadFile("../../deploy/examples/mesh-by-claim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o resourceapi.ResourceClaimTemplate
		if err := yaml.UnmarshalStrict([]byte(doc), &o); err == nil && o.Kind == "ResourceClaimTemplate" {
			o.Namespace = draNamespace
			return &o
		}
	}
	t.Fatal("no ResourceClaimTemplate in deploy/examples/mesh-by-claim.yaml")
	return nil
}

func basePod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: draNamespace},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: new(bool), TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: env.Image, ImagePullPolicy: corev1.PullNever}}}}
}

// meshPodByResource asks for the mesh as deploy/examples/mesh-by-resource.yaml does.
func meshPodByResource(name string) *corev1.Pod {
	p := basePod(name)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"mesh.meshlet.dev/mesh": resource.MustParse("1")}
	return p
}

// meshPodByClaim asks for the mesh with a claim made from a template.
func meshPodByClaim(name, template string) *corev1.Pod {
	p := basePod(name)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "mesh", ResourceClaimTemplateName: &template}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "mesh"}}
	return p
}

func createPod(t testing.TB, c *clusterenv.Cluster, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func getPod(t testing.TB, c *clusterenv.Cluster, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.Client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// claimOf is the name of the claim made for the pod from its template.
func claimOf(t testing.TB, c *clusterenv.Cluster, p *corev1.Pod) string {
	t.Helper()
	for _, s := range getPod(t, c, p).Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	t.Fatalf("pod %s has no claim", p.Name)
	return ""
}

// checkEnrolled: ztunnel got exactly one Add for the pod, with its sandbox's
// network namespace, whose rules redirect DNS exactly when dns says.
func checkEnrolled(t testing.TB, m *mesh, p *corev1.Pod, dns bool) {
	t.Helper()
	m.waitFor("the pod's Add", func([]*zdstest.Request) bool { return len(m.adds(string(p.UID))) > 0 })
	_, netns := podSandbox(t, p)
	adds := m.adds(string(p.UID))
	if len(adds) != 1 || adds[0].NetnsInode != inode(t, netns) {
		t.Fatalf("ztunnel got %v for pod %s, want one Add with its netns", adds, p.Name)
	}
	rules, err := exec.Command("nsenter", "--net="+netns, "nft", "list", "table", "inet", "meshlet").CombinedOutput()
	if err != nil {
		t.Fatalf("pod %s has no meshlet table: %v\n%s", p.Name, err, rules)
	}
	if got := strings.Contains(string(rules), "redirect to :15053"); got != dns {
		t.Fatalf("pod %s: DNS redirected = %v, want %v:\n%s", p.Name, got, dns, rules)
	}
}

// waitClaimEnrolled: the claim's mesh device status says Enrolled, with
// the pod's IP as network data.
func waitClaimEnrolled(t testing.TB, c *clusterenv.Cluster, claim string, p *corev1.Pod) {
	t.Helper()
	var last *resourceapi.ResourceClaim
	waitForf(t, func() (bool, string) {
		rc, err := c.Client.ResourceV1().ResourceClaims(draNamespace).Get(context.Background(), claim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		last = rc
		ip := getPod(t, c, p).Status.PodIP
		for _, d := range rc.Status.Devices {
			for _, cond := range d.Conditions {
				if d.Driver == draplugin.DefaultDriverName && d.ShareID != nil && cond.Type == draplugin.ConditionEnrolled && cond.Status == metav1.ConditionTrue &&
					d.NetworkData != nil && len(d.NetworkData.IPs) > 0 && strings.HasPrefix(d.NetworkData.IPs[0], ip+"/") {
					return true, ""
				}
			}
		}
		return false, ""
	}, func() string { return "claim " + claim + " status.devices Enrolled: " + toYAML(last.Status.Devices) })
}

// waitEvent waits for an event on the pod whose message contains text.
func waitEvent(t testing.TB, c *clusterenv.Cluster, p *corev1.Pod, text string) {
	t.Helper()
	var seen []string
	waitForf(t, func() (bool, string) {
		evs, err := c.Client.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			return false, err.Error()
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			if strings.Contains(e.Message, text) {
				t.Logf("event %s: %s", e.Reason, e.Message)
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, ""
	}, func() string {
		return "an event of pod " + p.Name + " containing " + text + "; seen: " + strings.Join(seen, " | ")
	})
}

// waitDeviceTaint waits until the node's mesh device is (or is not)
// tainted not-ready.
func waitDeviceTaint(t testing.TB, c *clusterenv.Cluster, tainted bool) {
	t.Helper()
	var last string
	waitForf(t, func() (bool, string) {
		slices, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range slices.Items {
			if s.Spec.Driver != draplugin.DefaultDriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != env.NodeName {
				continue
			}
			last = toYAML(s.Spec.Devices)
			for _, d := range s.Spec.Devices {
				has := false
				for _, taint := range d.Taints {
					has = has || (taint.Key == draplugin.TaintKey(draplugin.DefaultDriverName) && taint.Effect == resourceapi.DeviceTaintEffectNoSchedule)
				}
				if d.Name == draplugin.DeviceName && has == tainted {
					return true, ""
				}
			}
		}
		return false, ""
	}, func() string {
		return "mesh device tainted=" + map[bool]string{true: "true", false: "false"}[tainted] + "; devices: " + last
	})
}

// preparedClaims reads meshlet's prepared-claims file.
func preparedClaims(t testing.TB) *claimstore.Store {
	t.Helper()
	s, err := claimstore.Open(theEnv(t).MeshletStateDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitForf(t, func() (bool, string) { return cond(), "" }, func() string { return what })
}

// waitForf polls cond (at most 60 s) and fails with describe() when it
// never holds.
func waitForf(t testing.TB, cond func() (bool, string), describe func() string) {
	t.Helper()
	waitForfWithin(t, 60*time.Second, cond, describe)
}

// waitForfWithin is waitForf with a deadline of its own.
func waitForfWithin(t testing.TB, timeout time.Duration, cond func() (bool, string), describe func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr string
	for {
		ok, errText := cond()
		if ok {
			return
		}
		if errText != "" {
			lastErr = errText
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%s)", describe(), lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func toYAML(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}

// TestDRASlots: on a cluster without DRAConsumableCapacity (as 1.34 and
// 1.35 run), --dra-slots publishes plain devices; each mesh pod takes one,
// a pod beyond the slots stays Pending until one is freed.
func TestDRASlots(t *testing.T) {
	c := startCluster(t, map[string]bool{"DRAConsumableCapacity": false})
	ctx := context.Background()
	applyManifest(t, c, "../../deploy/dra.yaml", "DeviceClass")
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+c.KubeletRootDir(), "--dra-slots=2")
	t.Cleanup(func() {
		if err := c.DeletePods(); err != nil {
			t.Errorf("delete pods: %v", err)
		}
	})
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: draNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var devices []resourceapi.Device
	waitFor(t, "a slice with two plain mesh devices", func() bool {
		list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false
		}
		devices = list.Items[0].Spec.Devices
		return len(devices) == 2 && devices[0].Name == "mesh-0" && devices[1].Name == "mesh-1" &&
			devices[0].AllowMultipleAllocations == nil && len(devices[0].Taints) == 0
	})
	a, b := createPod(t, c, meshPodByResource("slot-a")), createPod(t, c, meshPodByResource("slot-b"))
	for _, p := range []*corev1.Pod{a, b} {
		waitPod(t, c, p, "Running", running)
		checkEnrolled(t, m, p, true)
	}
	third := createPod(t, c, meshPodByResource("slot-c"))
	waitPod(t, c, third, "Unschedulable: both slots taken", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	if err := c.Client.CoreV1().Pods(draNamespace).Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, third, "Running once a slot is free", running)
	checkEnrolled(t, m, third, true)
}

// metricValue is the value of an unlabelled metric in a Prometheus text page.
func metricValue(page, name string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
