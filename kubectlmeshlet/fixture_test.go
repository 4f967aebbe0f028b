package kubectlmeshlet

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshlet/meshlet/agent/nodestatus"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got, go test -update rewrites it):\n%s", path, d)
	}
}

// testNow is the tests' clock: reports' times are before it.
var testNow = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// fakeExec answers pods/exec from canned results, by pod name.
type fakeExec struct {
	results map[string]execResult
	errs    map[string]error
}

func (f fakeExec) Exec(_ context.Context, _, pod, container string, command []string) (execResult, error) {
	if container != ContainerName || len(command) == 0 || command[0] != MeshletCommand {
		return execResult{}, errors.New("unexpected exec")
	}
	if err, ok := f.errs[pod]; ok {
		return execResult{}, err
	}
	if r, ok := f.results[pod]; ok {
		return r, nil
	}
	return execResult{}, errors.New("no such pod")
}

// reportJSON is meshlet status -o json's output for r.
func reportJSON(t testing.TB, r nodestatus.Report) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readyReport(node string, enrolled int) nodestatus.Report {
	r := nodestatus.Report{Status: nodestatus.StatusReady, Detail: "ok", Healthy: true,
		Summary: &nodestatus.Summary{Node: node, Version: "v0.3.0", Ready: true, Detail: "ok",
			Mesh:        nodestatus.Mesh{Ready: true},
			RuntimeHook: nodestatus.RuntimeHook{Mode: "nri", Connected: true},
			Ztunnel:     nodestatus.Ztunnel{Socket: "/var/run/ztunnel/ztunnel.sock", Connections: 1},
			PodCounts:   map[string]int{"enrolled": enrolled, "skipped": 1}, Started: testNow.Add(-time.Hour)}}
	for i := range enrolled {
		r.Pods = append(r.Pods, nodestatus.Pod{Namespace: "shop", Name: node + "-app-" + string(rune('a'+i)), UID: node + "-uid", State: "enrolled",
			Since: testNow.Add(-10 * time.Minute), Ztunnel: "acked"})
	}
	r.Pods = append(r.Pods, nodestatus.Pod{Namespace: "kube-system", Name: "coredns", State: "skipped", Since: testNow.Add(-time.Hour), Reason: "namespace excluded"})
	return r
}

// cniReport is a node in CNI mode with a failed pod and no ztunnel.
func cniReport(node string) nodestatus.Report {
	return nodestatus.Report{Status: nodestatus.StatusNotReady, Detail: "no ztunnel connected to /var/run/ztunnel/ztunnel.sock since 3m", Healthy: false,
		Problems: []string{"no ztunnel connected", "1 mesh pod failed"},
		Summary: &nodestatus.Summary{Node: node, Version: "v0.3.0", Detail: "no ztunnel connected",
			RuntimeHook: nodestatus.RuntimeHook{Mode: "cni", Connected: true},
			Ztunnel:     nodestatus.Ztunnel{Socket: "/var/run/ztunnel/ztunnel.sock"},
			PodCounts:   map[string]int{"failed": 1},
			RecentFailures: []nodestatus.Failure{{Namespace: "shop", Name: "cart-7", UID: "u7", Reason: "ztunnel: no connection",
				At: testNow.Add(-2 * time.Minute), Attempts: 4}}},
		Pods: []nodestatus.Pod{{Namespace: "shop", Name: "cart-6", UID: "u6", State: "failed", Since: testNow.Add(-5 * time.Minute),
			Reason: "redirect: nft: Operation not permitted", Retries: 2}}}
}

// testCluster is a fake cluster with the chart's DaemonSet in
// meshlet-system and a meshlet pod on each of nodes.
type testCluster struct {
	objects []runtime.Object
	exec    fakeExec
}

const dsUID = types.UID("ds-uid")

func chartDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": "meshlet", "app.kubernetes.io/instance": "meshlet",
		"app.kubernetes.io/version": "0.3.0", "helm.sh/chart": "meshlet-0.3.0", "app.kubernetes.io/managed-by": "Helm"}
	sel := map[string]string{"app.kubernetes.io/name": "meshlet", "app.kubernetes.io/instance": "meshlet"}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "meshlet", Namespace: DefaultNamespace, UID: dsUID, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "check-nri", Image: "localhost/meshlet/meshlet:0.3.0"}},
				Containers: []corev1.Container{{Name: "meshlet", Image: "localhost/meshlet/meshlet:0.3.0",
					Env: []corev1.EnvVar{{Name: "MESHLET_CONFIG_MAP", Value: "meshlet-system/meshlet-settings,shop/extra-settings"}}}}}}}}
}

func meshletPodOn(node, image string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-" + node, Namespace: DefaultNamespace,
		Labels:          map[string]string{"app.kubernetes.io/name": "meshlet", "app.kubernetes.io/instance": "meshlet"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "meshlet", UID: dsUID}}},
		Spec: corev1.PodSpec{NodeName: node, InitContainers: []corev1.Container{{Name: "check-nri", Image: image}},
			Containers: []corev1.Container{{Name: "meshlet", Image: image}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "check-nri", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "meshlet", Image: image, ImageID: image + "@sha256:0123",
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}}}
}

func node(name, runtime string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{
		ContainerRuntimeVersion: runtime, KubeletVersion: "v1.37.2"},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// client makes the fake clientset, serving Kubernetes v1.37.2 with
// resource.k8s.io/v1.
func (tc *testCluster) cluster(namespace string) *cluster {
	client := fake.NewClientset(tc.objects...)
	d := client.Discovery().(*fakediscovery.FakeDiscovery)
	d.FakedServerVersion = &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}
	d.Resources = []*metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1"}}
	return &cluster{client: client, exec: tc.exec, namespace: namespace, selector: DefaultSelector}
}

func (tc *testCluster) connect(_ context.Context, g globalFlags) (*cluster, error) {
	return tc.cluster(g.namespace), nil
}

// twoNodeCluster: node-a healthy on NRI, node-b in CNI mode with failed
// pods, node-c's meshlet crash-looping, node-d without meshlet (CRI-O).
func twoNodeCluster(t testing.TB) *testCluster {
	crashing := meshletPodOn("node-c", "localhost/meshlet/meshlet:0.2.0")
	crashing.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	return &testCluster{
		objects: []runtime.Object{chartDaemonSet(), meshletPodOn("node-a", "localhost/meshlet/meshlet:0.3.0"),
			meshletPodOn("node-b", "localhost/meshlet/meshlet:0.3.0"), crashing,
			node("node-a", "containerd://2.1.4"), node("node-b", "containerd://1.7.27"), node("node-c", "containerd://2.1.4"), node("node-d", "cri-o://1.34.0"),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DefaultNamespace, Labels: map[string]string{podSecurityLabel: "privileged"}}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-settings", Namespace: DefaultNamespace}, Data: map[string]string{"settings.yaml": "kind: NodeSettings\n"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-token", Namespace: DefaultNamespace}, Data: map[string][]byte{"token": []byte("s3cret")}},
			&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "shop"}, Reason: "MeshEnrollFailed", Type: "Warning",
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "cart-6"}, Source: corev1.EventSource{Component: "meshlet", Host: "node-b"}},
			&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e2", Namespace: "shop"}, Reason: "Scheduled", Type: "Normal",
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "cart-6"}},
		},
		exec: fakeExec{results: map[string]execResult{
			"meshlet-node-a": {Stdout: reportJSON(t, readyReport("node-a", 2))},
			"meshlet-node-b": {Stdout: reportJSON(t, cniReport("node-b")), ExitCode: 1},
		}},
	}
}
