package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// tolerateMissingMeshlet is the annotation that lets a pod start without
// meshlet's NRI plugin on this environment's runtime: a gate pod carries
// it, so that only the container gate stands between it and running
// outside the mesh, as on a runtime whose NRI configuration requires
// nothing.
const tolerateMissingMeshlet = "tolerate-missing-plugins.meshlet.dev"

// TestGate: on the real cluster, a mesh pod whose sandbox meshlet never
// saw (its NRI plugin disconnected on purpose, the runtime told to
// tolerate that) gets its claim prepared, its sandbox created and its app
// container refused by the mesh device's CDI hook, meshlet-gate, with the
// reason in the pod's events; once NRI connects, meshlet enrolls the
// running sandbox and the kubelet's retry starts the container, which the
// gate now lets through. Then meshlet is killed and the container
// stopped: the gate refuses the kubelet's new container until meshlet is
// back.
func TestGate(t *testing.T) {
	// Short back-off: the test waits for the kubelet to try a refused
	// container again.
	c := startClusterWith(t, clusterenv.Options{MaxContainerRestartPeriod: 2 * time.Second})
	ctx := context.Background()
	applyManifest(t, c, "../../deploy/dra.yaml", "DeviceClass")
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	e := theEnv(t)
	// meshlet's NRI socket is a path that leads nowhere until the test
	// links it to the runtime's.
	nriLink := filepath.Join(t.TempDir(), "nri.sock")
	m := &mesh{t: t, env: e, socket: filepath.Join(t.TempDir(), "zt.sock"),
		flags: []string{"--kubeconfig=" + kubeconfig, "--kubelet-root-dir=" + c.KubeletRootDir(), "--mode=nri", "--nri-socket=" + nriLink}}
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
	// Its snapshot ends once meshlet has listed the runtime's pods: after
	// NRI connects, below.
	m.dialZtunnel(nil)
	t.Cleanup(func() {
		if err := c.DeletePods(); err != nil {
			t.Errorf("delete pods: %v", err)
		}
	})
	waitMeshletLog(t, m.meshlet, 0, kubeletRegistered)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: draNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The device is tainted (the runtime hook is not in place), so the
	// scheduler keeps mesh pods away; the claim tolerates the taint to get
	// past that first guard.
	waitDeviceTaint(t, c, true)
	template := exampleTemplate(t)
	template.Name = "mesh-gated"
	template.Spec.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{
		Key: draplugin.TaintKey(draplugin.DefaultDriverName), Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(draNamespace).Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := meshPodByClaim("gated", template.Name)
	p.Annotations = map[string]string{tolerateMissingMeshlet: "true"}
	p = createPod(t, c, p)

	waitEvent(t, c, p, "meshlet-gate: container refused: meshlet has not enrolled pod "+string(p.UID))
	// (The pod's phase may say Running: the kubelet counts a container it
	// keeps trying to start.)
	for _, cs := range getPod(t, c, p).Status.ContainerStatuses {
		if containerRan(cs) {
			t.Fatalf("container %s ran although meshlet never enrolled the pod: %+v", cs.Name, cs)
		}
	}
	if adds := m.adds(string(p.UID)); len(adds) != 0 {
		t.Fatalf("ztunnel got %v for a pod meshlet never saw", adds)
	}
	waitMetric(t, m, `meshlet_gate_decisions_total{decision="refused"}`, func(v float64) bool { return v >= 1 })

	// NRI connects: Synchronize hands meshlet the running sandbox, it is
	// enrolled late, and the kubelet's retry passes the gate.
	if err := os.Symlink(e.NRISocket, nriLink); err != nil {
		t.Fatal(err)
	}
	waitDeviceTaint(t, c, false)
	waitPodFor(t, c, p, "Running once meshlet enrolled it", 2*time.Minute, running)
	checkEnrolled(t, m, p, false)
	waitMetric(t, m, `meshlet_gate_decisions_total{decision="allowed"}`, func(v float64) bool { return v >= 1 })

	// meshlet killed, the pod's container stopped: the kubelet's new
	// container is refused by the gate (the pod tolerates meshlet's
	// absence, so the runtime's required-plugins check is not what
	// refuses it) until meshlet is back.
	if err := m.meshlet.Kill(); err != nil {
		t.Fatal(err)
	}
	logBefore, err := os.ReadFile(m.meshlet.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := e.Crictl("ps", "-q", "--label", "io.kubernetes.pod.uid="+string(p.UID))
	if err != nil || strings.TrimSpace(ctr) == "" {
		t.Fatalf("the pod's container: %q %v", ctr, err)
	}
	if out, err := e.Crictl("stop", strings.TrimSpace(ctr)); err != nil {
		t.Fatalf("crictl stop: %v: %s", err, out)
	}
	waitEvent(t, c, p, "meshlet-gate: container refused: meshlet did not answer")
	m.startMeshlet()
	if err := m.meshlet.WaitReady(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitMeshletLog(t, m.meshlet, len(logBefore), kubeletRegistered)
	waitPodFor(t, c, p, "Running again once meshlet is back", 2*time.Minute, func(got *corev1.Pod) bool {
		return running(got) && got.Status.ContainerStatuses[0].RestartCount >= 1
	})
}

// waitMetric waits until the meshlet's metric satisfies ok.
func waitMetric(t testing.TB, m *mesh, name string, ok func(float64) bool) {
	t.Helper()
	var last string
	waitForf(t, func() (bool, string) {
		_, page, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
		if err != nil {
			return false, err.Error()
		}
		v, found := metricValue(page, name)
		last = fmt.Sprintf("%s = %v (found %t)", name, v, found)
		return found && ok(v), ""
	}, func() string { return "metric " + last })
}

// containerRan reports whether the kubelet saw the container's process
// start. A container whose start failed (a refusing createRuntime hook)
// may be reported Terminated with reason StartError and a zero start time:
// it never ran.
func containerRan(cs corev1.ContainerStatus) bool {
	started := func(term *corev1.ContainerStateTerminated) bool {
		return term != nil && term.Reason != "StartError" && term.StartedAt.Unix() > 0
	}
	return cs.State.Running != nil || (cs.Started != nil && *cs.Started) ||
		started(cs.State.Terminated) || started(cs.LastTerminationState.Terminated)
}
