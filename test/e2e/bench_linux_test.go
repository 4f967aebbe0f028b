package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// BenchmarkRunPodSandbox: RunPodSandbox's wall time (through the CRI, as
// the kubelet calls it) of a mesh-labelled pod on each runtime, without
// meshlet and with meshlet as a host process; on containerd 2.x also with
// meshlet as the chart's DaemonSet pod on the test cluster's kubelet (its
// image imported into the same containerd; standalone, as the host process
// is): rules + ZDS Add + Ack inside the hook. The pod is removed after each
// iteration, untimed. With meshlet it also reports the enroll latency
// quantiles from meshlet's own histogram (interpolated inside buckets).
func BenchmarkRunPodSandbox(b *testing.B) {
	for _, rt := range runtimeMatrix {
		for _, where := range []string{"none", "host", "pod"} {
			if where == "pod" && rt.runtime != env.Containerd {
				continue // the test cluster's kubelet runs on containerd 2.x
			}
			b.Run(fmt.Sprintf("runtime=%s/meshlet=%s", rt.runtime, where), func(b *testing.B) {
				benchRunPodSandbox(b, runtimeEnv(b, rt), where)
			})
		}
	}
}

func benchRunPodSandbox(b *testing.B, e *env.Env, where string) {
	var metrics func() (string, error)
	switch where {
	case "host":
		m := startMeshIn(b, e)
		metrics = func() (string, error) {
			_, body, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
			return body, err
		}
	case "pod":
		c := startCluster(b, nil)
		buildImage(b, "bench")
		r := installMeshlet(b, c, "bench", map[string]any{"standalone": true})
		r.waitRolledOut("bench")
		followZtunnel(b, r.zt).current()
		metrics = func() (string, error) { return nodeGet(b, "http://127.0.0.1:9881/metrics") }
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		spec := env.PodSpec{Name: fmt.Sprintf("bench-%d", i), Namespace: "app",
			UID: fmt.Sprintf("bench-%s-%d-%d", where, time.Now().UnixNano(), i), Labels: ambient}
		start := time.Now()
		id, err := e.RunPod(spec)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err := e.RemovePod(id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "runp-p50-ms")
	if metrics != nil {
		body, err := metrics()
		if err != nil {
			b.Fatal(err)
		}
		h := parseHistogram(body, "meshlet_enroll_duration_seconds", `result="enrolled"`)
		b.ReportMetric(h.quantile(0.5)*1e3, "enroll-p50-ms")
		b.ReportMetric(h.quantile(0.99)*1e3, "enroll-p99-ms")
	}
}

// nodeGet fetches url from inside the node's network namespace (where a
// host-network pod listens).
func nodeGet(t testing.TB, url string) (string, error) {
	nsPath := theEnv(t).NetnsPath()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return netnstest.Dial(ctx, nsPath, network, addr)
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// BenchmarkMeshletMemory enrolls pods through the runtime (containerd,
// NRI) and reports the daemon's resident memory once they are all
// enrolled: VmRSS, its anonymous part (RssAnon: what meshlet allocates)
// and its file-backed part (RssFile: the binary's pages it has mapped).
//   - standalone/pods=100: no API server. Then meshlet is restarted, and
//     the time until it serves the 100 pods again is reported (Synchronize
//     re-adopts them: it must stay well inside the runtime's 5 s
//     registration timeout).
//   - api/pods=100, api/pods=1000: with a real kube-apiserver holding the
//     pods (scheduled to this node) and their labelled namespace, so the
//     daemon's watchers cache them as on a cluster node.
func BenchmarkMeshletMemory(b *testing.B) {
	b.Run("standalone/pods=100", func(b *testing.B) { benchMeshletMemory(b, false, 100) })
	b.Run("api/pods=100", func(b *testing.B) { benchMeshletMemory(b, true, 100) })
	b.Run("api/pods=1000", func(b *testing.B) { benchMeshletMemory(b, true, 1000) })
}

func benchMeshletMemory(b *testing.B, api bool, pods int) {
	e := theEnv(b)
	if pods > 200 {
		e = roomyEnv(b) // the shared one's pod network is a /24
	}
	var m *mesh
	var client kubernetes.Interface
	if api {
		var kubeconfig string
		client, kubeconfig = apiServerIn(b, e)
		if _, err := client.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: ambient}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		// No controller manager makes it.
		if _, err := client.CoreV1().ServiceAccounts("app").Create(context.Background(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		m = startMeshIn(b, e, "--kubeconfig="+kubeconfig, "--dra=false") // no kubelet here
	} else {
		m = startMeshIn(b, e)
	}
	var ids []string
	b.Cleanup(func() {
		for _, id := range ids {
			_ = e.RemovePod(id)
		}
	})
	for b.Loop() {
		for i := len(ids); i < pods; i++ {
			spec := env.PodSpec{Name: fmt.Sprintf("mem-%d", i), Namespace: "app",
				UID: fmt.Sprintf("mem-%d-%d", time.Now().UnixNano(), i), Labels: ambient}
			if api {
				// The pod the kubelet would run the sandbox for: same
				// name, namespace and UID, on this node.
				p, err := client.CoreV1().Pods("app").Create(context.Background(), deploymentPod(spec.Name), metav1.CreateOptions{})
				if err != nil {
					b.Fatal(err)
				}
				spec.UID = string(p.UID)
			}
			id, err := e.RunPod(spec)
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	_, body, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
	if want := fmt.Sprintf("meshlet_enrolled_pods %d\n", pods); err != nil || !strings.Contains(body, want) {
		b.Fatalf("want %d enrolled pods (%v)", pods, err)
	}
	for _, field := range []string{"VmRSS", "RssAnon", "RssFile"} {
		kb, err := procStatus(m.meshlet.Pid(), field)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(kb)/1024, field+"-MiB")
	}
	if api {
		return
	}
	m.zt.Stop()
	m.zt = nil
	if err := m.meshlet.Stop(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	m.startMeshlet()
	if err := m.meshlet.WaitReady(30 * time.Second); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "restart-ready-s")
	m.connectZtunnel()
	if n := len(zdstestAdds(m)); n != pods {
		b.Fatalf("after restart ztunnel got %d adds, want %d", n, pods)
	}
}

// roomyEnv starts a containerd of the test's own whose pod network holds
// 4,094 addresses, stopped when the test ends.
func roomyEnv(b *testing.B) *env.Env {
	b.Helper()
	shared := theEnv(b)
	// Not under b.TempDir(): the runtime's sockets are made in it, and
	// the benchmark's long name would put them past a socket path's
	// 108 bytes.
	dir, err := os.MkdirTemp("", "mle2e-roomy")
	if err != nil {
		b.Fatal(err)
	}
	e, err := env.Start(env.Options{BinDir: shared.BinDir(), Dir: dir, Subnet: "10.220.0.0/20", Logf: b.Logf})
	if err != nil {
		_ = os.RemoveAll(dir)
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Errorf("stop the environment: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	return e
}

// deploymentPod is a pod as a Deployment's would be on a cluster, on this
// node: two containers with probes,
// resources, environment and volumes, kubectl's last-applied copy. The
// API server adds its defaults and managed fields.
func deploymentPod(name string) *corev1.Pod {
	container := func(name string, port int32) corev1.Container {
		return corev1.Container{Name: name, Image: env.Image,
			Ports: []corev1.ContainerPort{{Name: name + "-http", ContainerPort: port}},
			Env: []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "POD_NAME",
				ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(port)}}},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromInt32(port)}}},
			VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "tmp", MountPath: "/tmp"}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "shop", "version": "v1", "pod-template-hash": "6d4cf56db6"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat(`{"spec":{"template":"x"}}`, 40)}},
		Spec: corev1.PodSpec{NodeName: env.NodeName, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{container("app", 8080), container("worker", 9090)},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "shop-config"}}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}},
	}
}

func zdstestAdds(m *mesh) map[string]uint64 { return zdstest.AddedInodes(m.zt.Requests()) }

// procStatus reads one kB field of /proc/<pid>/status.
func procStatus(pid int, field string) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) >= 2 && f[0] == field+":" {
			return strconv.Atoi(f[1]) // kB
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

type histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf last
	counts []float64 // cumulative
}

// parseHistogram is histogram name's series with labels (as the text
// format writes them before le, e.g. `result="enrolled"`; "" for none) in a
// Prometheus text page.
func parseHistogram(text, name, labels string) histogram {
	prefix := name + "_bucket{le=\""
	if labels != "" {
		prefix = name + "_bucket{" + labels + ",le=\""
	}
	var h histogram
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		le, count, _ := strings.Cut(rest, "\"} ")
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		c, _ := strconv.ParseFloat(count, 64)
		h.bounds = append(h.bounds, bound)
		h.counts = append(h.counts, c)
	}
	return h
}

// quantile interpolates linearly inside the bucket holding q.
func (h histogram) quantile(q float64) float64 {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return math.NaN()
	}
	rank := q * h.counts[len(h.counts)-1]
	lowB, lowC := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank {
			if math.IsInf(h.bounds[i], 1) {
				return lowB
			}
			return lowB + (h.bounds[i]-lowB)*(rank-lowC)/(c-lowC)
		}
		lowB, lowC = h.bounds[i], c
	}
	return lowB
}

// BenchmarkDRA, on the real kubelet:
//   - PodStart: pod create → Running, for a mesh pod selected by its
//     namespace's label and for one asking for the mesh by extended
//     resource (a claim the scheduler allocates and meshlet prepares). Both
//     are enrolled; the difference is the DRA path's cost.
//   - Taint: from ztunnel's disconnect until the node's ResourceSlice shows
//     the device tainted, and from its reconnect until it is untainted.
func BenchmarkDRA(b *testing.B) {
	c := startCluster(b, nil)
	applyManifest(b, c, "../../deploy/dra.yaml", "DeviceClass")
	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		b.Fatal(err)
	}
	m := startMesh(b, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+c.KubeletRootDir())
	b.Cleanup(func() { _ = c.DeletePods() })
	ctx := context.Background()
	for ns, labels := range map[string]map[string]string{"bench-labels": ambient, draNamespace: nil} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	waitDeviceTaint(b, c, false)
	for _, how := range []string{"label", "claim"} {
		b.Run("PodStart/mesh="+how, func(b *testing.B) {
			var lat []time.Duration
			i := 0
			for b.Loop() {
				i++
				p := meshPodByResource(fmt.Sprintf("bench-%s-%d", how, i))
				if how == "label" {
					p = basePod(p.Name)
					p.Namespace = "bench-labels"
				}
				start := time.Now()
				p = createPod(b, c, p)
				for !running(getPod(b, c, p)) {
					if time.Since(start) > 60*time.Second {
						b.Fatalf("pod %s not Running after 60s", p.Name)
					}
					time.Sleep(5 * time.Millisecond)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				if err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
				waitFor(b, "the pod gone", func() bool {
					_, err := c.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
					return apierrors.IsNotFound(err)
				})
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/1e6, "create-to-running-p50-ms")
		})
	}
	b.Run("Taint", func(b *testing.B) {
		var taint, untaint []time.Duration
		for b.Loop() {
			start := time.Now()
			m.zt.Stop()
			m.zt = nil
			waitTaintedNow(b, c, true)
			taint = append(taint, time.Since(start))
			start = time.Now()
			m.connectZtunnel()
			waitTaintedNow(b, c, false)
			untaint = append(untaint, time.Since(start))
		}
		b.StopTimer()
		slices.Sort(taint)
		slices.Sort(untaint)
		b.ReportMetric(float64(taint[len(taint)/2])/1e6, "taint-p50-ms")
		b.ReportMetric(float64(taint[len(taint)-1])/1e6, "taint-max-ms")
		b.ReportMetric(float64(untaint[len(untaint)/2])/1e6, "untaint-p50-ms")
		b.ReportMetric(float64(untaint[len(untaint)-1])/1e6, "untaint-max-ms")
	})
}

// waitTaintedNow polls the node's slice every 5 ms until its mesh device's
// not-ready taint is as wanted (at most 10 s).
func waitTaintedNow(b *testing.B, c *clusterenv.Cluster, tainted bool) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		list, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err == nil && len(list.Items) == 1 && len(list.Items[0].Spec.Devices) == 1 {
			if has := len(list.Items[0].Spec.Devices[0].Taints) > 0; has == tainted {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("mesh device tainted=%t not seen within 10s", tainted)
}

// BenchmarkGateContainerStart: CreateContainer + StartContainer (through
// the CRI, as the kubelet calls them) of an app container
// in an enrolled pod, without a CDI device, with one whose hook is
// /bin/true, and with the container gate's: the differences are what CDI
// and a hook cost, and what the gate adds to a container's start on the
// real runtime. meshlet runs
// with a real API server and its DRA plugin (which installs the gate)
// registered in a kubelet directory no kubelet reads: a kubelet would take
// the benchmark's sandbox, which it did not create, for an orphan and
// stop it.
func BenchmarkGateContainerStart(b *testing.B) {
	bin := privtest.RequireEnv(b, "MESHLET_KUBE_BIN", "the directory test/env/install-kube.sh prints (`make test` sets it)")
	k, err := kubeenv.StartIn(bin, b.TempDir(), theEnv(b).NetnsPath())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(k.Stop)
	kubeconfig, err := k.Kubeconfig()
	if err != nil {
		b.Fatal(err)
	}
	kubelet := b.TempDir()
	if err := os.MkdirAll(filepath.Join(kubelet, "plugins_registry"), 0o755); err != nil {
		b.Fatal(err)
	}
	m := startMesh(b, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+kubelet)
	e := theEnv(b)
	spec := env.PodSpec{Name: "bench-gate", Namespace: "bench-gate", UID: fmt.Sprintf("bench-gate-%d", time.Now().UnixNano()), Labels: ambient}
	podID, err := e.RunPod(spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.RemovePod(podID) })
	m.waitFor("the bench pod's Add", func([]*zdstest.Request) bool { return len(m.adds(spec.UID)) == 1 })
	// A floor: a CDI device whose createRuntime hook is /bin/true, the cost
	// of CDI injection and of runc running any hook.
	floor := filepath.Join(e.CDISpecDir(), "bench.example-floor.json")
	if err := os.WriteFile(floor, []byte(`{"cdiVersion":"0.3.0","kind":"bench.example/floor","devices":[{"name":"true","containerEdits":{"hooks":[{"hookName":"createRuntime","path":"/bin/true"}]}}]}`), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.Remove(floor) })
	for _, bm := range []struct{ name, cdi string }{
		{"cdi=none", ""},
		{"cdi=hook-bin-true", "bench.example/floor=true"},
		{"cdi=gate", draplugin.DefaultDriverName + "/mesh=gate"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			var cdi []string
			if bm.cdi != "" {
				cdi = []string{bm.cdi}
			}
			i := 0
			for b.Loop() {
				i++
				id, err := e.StartContainerWithCDI(podID, spec, fmt.Sprintf("c-%d-%d", len(bm.cdi), i), cdi...)
				if err != nil {
					b.Fatalf("container start (%s): %v", bm.name, err)
				}
				b.StopTimer()
				if out, err := e.Crictl("rm", "-f", id); err != nil {
					b.Fatalf("crictl rm: %v: %s", err, out)
				}
				b.StartTimer()
			}
		})
	}
	_, page, err := m.meshlet.Get("http://127.0.0.1:9881/metrics")
	if err != nil {
		b.Fatal(err)
	}
	if v, ok := metricValue(page, `meshlet_gate_decisions_total{decision="allowed"}`); !ok || v == 0 {
		b.Fatalf("the gate answered no container: the benchmark did not measure it")
	}
}
