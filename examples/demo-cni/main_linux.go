// Command demo-cni is `make demo-cni`: meshlet's CNI mode on a runtime
// without NRI. It starts a real containerd with NRI disabled and a real
// kube-apiserver (both in a network namespace of their own), meshlet in
// --mode auto and a ztunnel stand-in, shows meshlet-cni chained into the
// runtime's conflist, runs a mesh pod and a plain pod, rewrites the
// conflist as a primary CNI would, shows a mesh pod refused while meshlet
// is away, and cleans up.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/examples/internal/narrate"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/kubeenv"
)

// story tells the demo's story: on the terminal, or to its test.
var story = narrate.New("demo-cni", os.Stdout, os.Stderr)

func main() { os.Exit(run()) }

func run() int {
	bin, kbin := os.Getenv("MESHLET_E2E_BIN"), os.Getenv("MESHLET_KUBE_BIN")
	if bin == "" || kbin == "" || os.Geteuid() != 0 {
		story.Errorln("run as root through `make demo-cni` (it installs the runtime and the API server and sets MESHLET_E2E_BIN and MESHLET_KUBE_BIN)")
		return 2
	}
	dir, err := os.MkdirTemp("", "mlcnidemo")
	if err != nil {
		story.Errorln(err)
		return 1
	}
	defer os.RemoveAll(dir)
	story.Say("Starting containerd 2.4.2 with NRI disabled, runc and the CNI bridge plugin (private paths, own netns)…")
	e, err := env.Start(env.Options{BinDir: bin, Dir: dir, DisableNRI: true})
	if err != nil {
		story.Errorln(err)
		return 1
	}
	defer func() {
		story.Say("Cleaning up: pods removed, containerd and the API server stopped, namespace deleted.")
		if err := e.Stop(); err != nil {
			story.Errorln("teardown:", err)
		}
	}()
	story.Say("Starting etcd and kube-apiserver in the same netns…")
	if err := os.MkdirAll(filepath.Join(dir, "kube"), 0o700); err != nil {
		story.Errorln(err)
		return 1
	}
	k, err := kubeenv.StartIn(kbin, filepath.Join(dir, "kube"), e.NetnsPath())
	if err != nil {
		story.Errorln(err)
		return 1
	}
	defer k.Stop()
	if err := demo(e, k, dir); err != nil {
		story.Errorln(err)
		return 1
	}
	return 0
}

func demo(e *env.Env, k *kubeenv.Env, dir string) error {
	ctx := context.Background()
	c, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		return err
	}
	kubeconfig, err := k.Kubeconfig()
	if err != nil {
		return err
	}
	for name, labels := range map[string]map[string]string{"bookinfo": {"istio.io/dataplane-mode": "ambient"}, "legacy": nil} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		// No controller-manager here: the service account it would make.
		if _, err := c.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	story.Say("The runtime's conflist before meshlet (%s):", e.PrimaryConflist())
	story.File(e.PrimaryConflist())

	socket := filepath.Join(dir, "ztunnel.sock")
	m, zt, err := startMeshlet(e, socket, kubeconfig)
	if err != nil {
		return err
	}
	defer func() { zt.Stop(); m.Stop() }()
	if b, err := os.ReadFile(m.LogPath); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "Pod source selected") {
				story.Say("meshlet chose its mode itself (--mode auto):")
				story.Println("    " + line[strings.Index(line, "\"Pod source"):])
			}
		}
	}
	story.Say("meshlet is ready. The conflist now ends with meshlet-cni (written atomically, mode kept):")
	story.File(e.PrimaryConflist())

	mesh, err := runPod(e, c, "bookinfo", "productpage")
	if err != nil {
		return err
	}
	plain, err := runPod(e, c, "legacy", "legacy")
	if err != nil {
		return err
	}
	ino, _ := env.Inode(mesh.NetnsPath)
	story.Say("What ztunnel received before productpage's sandbox was returned (the CNI ADD waits for the enrollment):")
	for _, r := range zt.Requests() {
		if r.Kind == zdstest.Add {
			story.Printf("    Add %s/%s serviceAccount=%s, netns inode %d (sandbox netns inode %d)\n",
				r.Info.GetNamespace(), r.Info.GetName(), r.Info.GetServiceAccount(), r.NetnsInode, ino)
		}
	}
	story.Say("Redirection in productpage's netns (first lines of nft list table inet meshlet):")
	out, _ := exec.Command("nsenter", "--net="+mesh.NetnsPath, "nft", "list", "table", "inet", "meshlet").CombinedOutput()
	story.Print(narrate.Indent(narrate.Head(string(out), 8)))
	if exec.Command("nsenter", "--net="+plain.NetnsPath, "nft", "list", "table", "inet", "meshlet").Run() != nil {
		story.Say("legacy/legacy (namespace not in the mesh) has no meshlet table: untouched.")
	}

	original, err := os.ReadFile(e.PrimaryConflist())
	if err != nil {
		return err
	}
	var list map[string]any
	_ = json.Unmarshal(original, &list)
	plugins := list["plugins"].([]any)
	list["plugins"] = plugins[:len(plugins)-1]
	stripped, _ := json.MarshalIndent(list, "", "  ")
	start := time.Now()
	if err := os.WriteFile(e.PrimaryConflist(), stripped, 0o644); err != nil {
		return err
	}
	for time.Since(start) < 5*time.Second {
		if b, _ := os.ReadFile(e.PrimaryConflist()); strings.Contains(string(b), "meshlet-cni") {
			story.Say("A primary CNI rewrote the conflist without meshlet-cni: meshlet put it back after %v.", time.Since(start).Round(time.Millisecond))
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, metrics, err := m.Get("http://127.0.0.1:9881/metrics")
	if err == nil {
		story.Say("meshlet metrics:")
		for _, line := range strings.Split(metrics, "\n") {
			for _, name := range []string{"meshlet_mode", "meshlet_cni_reasserts_total", "meshlet_enrolled_pods", "meshlet_runtime_connected", "meshlet_enroll_duration_seconds_count"} {
				if strings.HasPrefix(line, name) {
					story.Println("    " + line)
				}
			}
		}
	}

	zt.Stop()
	if err := m.Stop(); err != nil {
		return err
	}
	story.Say("meshlet stopped (as during an update or after a reboot). meshlet-cni stays in the chain, so a new mesh pod is refused instead of starting unmeshed:")
	if _, err := runPod(e, c, "bookinfo", "reviews"); err != nil {
		story.Println("    " + narrate.LastLine(err.Error()))
	} else {
		story.Say("UNEXPECTED: bookinfo/reviews started without meshlet")
	}
	m, zt, err = startMeshlet(e, socket, kubeconfig)
	if err != nil {
		return err
	}
	p, err := runPod(e, c, "bookinfo", "reviews-retry")
	if err != nil {
		return err
	}
	story.Say("meshlet is back: the kubelet's retry (here bookinfo/reviews-retry) is enrolled (%d ztunnel Add for it).", countAdds(zt, p.uid))
	return nil
}

type pod struct {
	env.PodInfo
	uid string
}

// runPod creates the pod object and runs its sandbox, as the kubelet would.
func runPod(e *env.Env, c kubernetes.Interface, ns, name string) (*pod, error) {
	p, err := c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: env.NodeName, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "app", Image: env.Image}}}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	id, err := e.RunPod(env.PodSpec{Name: name, Namespace: ns, UID: string(p.UID)})
	if err != nil {
		return nil, err
	}
	info, err := e.InspectPod(id)
	if err != nil {
		return nil, err
	}
	story.Say("Created pod %s/%s (IP %s) in %v.", ns, name, info.IP, time.Since(start).Round(time.Millisecond))
	return &pod{PodInfo: info, uid: string(p.UID)}, nil
}

func startMeshlet(e *env.Env, socket, kubeconfig string) (*env.Meshlet, *zdstest.Ztunnel, error) {
	m, err := e.StartMeshlet(socket, "--kubeconfig="+kubeconfig, "--dra=false")
	if err != nil {
		return nil, nil, err
	}
	zt := &zdstest.Ztunnel{}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err = zt.Start(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			m.Stop()
			return nil, nil, fmt.Errorf("ztunnel stand-in: %w (meshlet log %s)", err, m.LogPath)
		}
	}
	if err := m.WaitReady(30 * time.Second); err != nil {
		zt.Stop()
		m.Stop()
		return nil, nil, err
	}
	return m, zt, nil
}

func countAdds(zt *zdstest.Ztunnel, uid string) int {
	n := 0
	for _, r := range zt.Requests() {
		if r.Kind == zdstest.Add && r.UID == uid {
			n++
		}
	}
	return n
}
