// Command demo-dra is `make demo-dra`: it starts a real containerd with NRI
// (in a network namespace of its own) and a single-node cluster on it
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a
// kubelet), installs the mesh DeviceClass from deploy/dra.yaml, runs the
// meshlet daemon with its DRA kubelet plugin and a ztunnel stand-in,
// creates a pod that asks for the mesh with `mesh.meshlet.dev/mesh: 1`,
// prints what each part did (the node's ResourceSlice, the claim the
// scheduler made, its Enrolled status, ztunnel's Add, the pod's rules),
// shows the device tainted while ztunnel is away (a second mesh pod stays
// Pending until it is back), deletes the pods while meshlet still runs
// (so their claims are unprepared) and cleans up, also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/draplugin/claimstore"
	"github.com/meshlet/meshlet/examples/internal/narrate"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

const (
	namespace      = "bookinfo"
	podName        = "reviews"
	serviceAccount = "bookinfo-reviews"
	driver         = draplugin.DefaultDriverName
)

// story tells the demo's story: on the terminal, or to its test.
var story = narrate.New("demo-dra", os.Stdout, os.Stderr)

func main() { os.Exit(run()) }

func run() int {
	e2eBin, clusterBin := os.Getenv("MESHLET_E2E_BIN"), os.Getenv(clusterenv.BinEnv)
	if e2eBin == "" || clusterBin == "" || os.Geteuid() != 0 {
		story.Errorln("run as root through `make demo-dra` (it installs the runtime and the cluster binaries and sets MESHLET_E2E_BIN and MESHLET_CLUSTER_BIN)")
		return 2
	}
	root, err := moduleRoot()
	if err != nil {
		story.Errorln(err)
		return 1
	}
	// Ctrl-C (or SIGTERM) ends the demo's waits; the teardown below runs
	// either way, and further signals do not interrupt it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
			story.Errorln("interrupted; cleaning up…")
		case <-finished:
		}
	}()

	failed := true
	dir, err := os.MkdirTemp("", "mldra") // short: socket paths live under it
	if err != nil {
		story.Errorln(err)
		return 1
	}
	defer func() {
		if failed && ctx.Err() == nil {
			story.Errorln("logs kept in", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	story.Say("Starting containerd 2.4.2 with NRI, runc and the CNI bridge plugin (private paths, own netns)…")
	e, err := env.Start(env.Options{BinDir: e2eBin, Dir: filepath.Join(dir, "rt"), RequiredPlugins: []string{"meshlet"}})
	if err != nil {
		story.Errorln(err)
		return 1
	}
	defer func() {
		if err := e.Stop(); err != nil {
			story.Errorln("runtime teardown:", err)
		}
		story.Say("Cleaned up: cluster stopped, pods removed, containerd stopped, namespace deleted.")
	}()
	if err := demo(ctx, e, root, dir, clusterBin); err != nil {
		if ctx.Err() != nil {
			return 130
		}
		story.Errorln("FAILED:", err)
		return 1
	}
	failed = false
	return 0
}

// moduleRoot is the repository's root (deploy/dra.yaml is read from it).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func demo(ctx context.Context, e *env.Env, root, dir, clusterBin string) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	story.Say("Starting a single-node cluster on it: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet 1.37.2…")
	start := time.Now()
	c, err := clusterenv.Start(clusterenv.Options{BinDir: clusterBin, Dir: filepath.Join(dir, "c"), NetnsPath: e.NetnsPath(),
		CRISocket: e.CRISocket, NodeName: env.NodeName,
		RemoveSandboxes: func() error { _, err := e.Crictl("rmp", "--all", "--force"); return err }})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer func() {
		if serr := c.Stop(); serr != nil {
			story.Errorln("cluster teardown:", serr)
		}
	}()
	story.Say("Node %q is Ready (%v).", env.NodeName, time.Since(start).Round(time.Second))
	if err := ctx.Err(); err != nil {
		return err
	}

	class, err := applyDeviceClass(ctx, c.Client, filepath.Join(root, "deploy", "dra.yaml"))
	if err != nil {
		return err
	}
	story.Say("Applied DeviceClass %s from deploy/dra.yaml (extended resource %s).", class.Name, deref(class.Spec.ExtendedResourceName))

	kubeconfig, err := c.Kube.Kubeconfig()
	if err != nil {
		return err
	}
	socket := filepath.Join(dir, "zt.sock")
	m, err := e.StartMeshlet(socket, "--kubeconfig="+kubeconfig, "--kubelet-root-dir="+c.KubeletRootDir())
	if err != nil {
		return err
	}
	defer func() {
		if serr := m.Stop(); serr != nil {
			story.Errorln("meshlet stop:", serr)
		}
	}()
	zt, err := connectZtunnel(ctx, socket)
	if err != nil {
		return fmt.Errorf("ztunnel stand-in: %w (meshlet log %s)", err, m.LogPath)
	}
	defer func() { zt.Stop() }()
	if err := m.WaitReady(30 * time.Second); err != nil {
		return err
	}
	// Pods go while the kubelet plugin runs, so their claims are
	// unprepared (deferred calls run last first: before meshlet stops).
	podsDeleted := false
	defer func() {
		if !podsDeleted {
			// After Ctrl-C the terminal signalled the cluster's processes
			// too: the API server may be gone, and Stop cleans up anyway.
			if derr := c.DeletePods(); derr != nil && ctx.Err() == nil {
				story.Errorln("delete pods:", derr)
			}
		}
	}()
	slice, dev, err := waitDevice(ctx, c.Client, false)
	if err != nil {
		return fmt.Errorf("%w (meshlet log %s)", err, m.LogPath)
	}
	story.Say("meshlet is ready: NRI plugin registered, ztunnel stand-in connected, DRA kubelet plugin %s registered.", driver)
	story.Println()
	story.Say("ResourceSlice %s (driver %s, node %s, pool %s):", slice.Name, slice.Spec.Driver, deref(slice.Spec.NodeName), slice.Spec.Pool.Name)
	printDevice(dev)

	// The namespace is not labelled for the mesh: the pod's request alone
	// puts it there.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod := meshPod(podName)
	story.Println()
	story.Say("Creating pod %s/%s (namespace not labelled for the mesh; the container asks for mesh.meshlet.dev/mesh: 1)…", namespace, podName)
	start = time.Now()
	if pod, err = c.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod, err = waitPod(ctx, c.Client, pod, "Running", 90*time.Second, running)
	if err != nil {
		return fmt.Errorf("%w (logs: kubelet %s, meshlet %s)", err, filepath.Join(dir, "c", "kubelet.log"), m.LogPath)
	}
	story.Say("Pod Running %v after creation: UID %s, IP %s.", time.Since(start).Round(time.Millisecond), pod.UID, pod.Status.PodIP)

	// The claim the scheduler made for the extended resource.
	if pod.Status.ExtendedResourceClaimStatus == nil {
		return errors.New("the pod has no extendedResourceClaimStatus: the scheduler did not make a claim for mesh.meshlet.dev/mesh")
	}
	claimName := pod.Status.ExtendedResourceClaimStatus.ResourceClaimName
	claim, err := waitClaimEnrolled(ctx, c.Client, claimName)
	if err != nil {
		return err
	}
	story.Println()
	story.Say("ResourceClaim %s/%s, made by the scheduler for the extended resource:", namespace, claimName)
	for _, r := range claim.Status.Allocation.Devices.Results {
		story.Printf("    allocated: request %s → driver %s, pool %s, device %s, shareID %s\n", r.Request, r.Driver, r.Pool, r.Device, deref((*string)(r.ShareID)))
	}
	for _, ref := range claim.Status.ReservedFor {
		story.Printf("    reserved for: %s %s (uid %s)\n", ref.Resource, ref.Name, ref.UID)
	}
	for _, d := range claim.Status.Devices {
		for _, cond := range d.Conditions {
			story.Printf("    status.devices[%s/%s]: %s=%s reason %s: %s\n", d.Pool, d.Device, cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		if d.NetworkData != nil {
			story.Printf("    status.devices[%s/%s].networkData.ips: %s\n", d.Pool, d.Device, strings.Join(d.NetworkData.IPs, ", "))
		}
	}
	claims, err := claimstore.Open(e.MeshletStateDir())
	if err != nil {
		return err
	}
	for _, pc := range claims.ForPod(string(pod.UID)) {
		story.Printf("    prepared by meshlet: %s/%s in %s (settings: %s)\n", pc.Namespace, pc.Name,
			filepath.Join("<state-dir>", claimstore.FileName), settings(pc.Settings.DNSCapture, pc.Settings.InboundCapture))
	}
	// The container gate: the prepared device named its CDI device, and the
	// runtime ran meshlet-gate before the app container started.
	_, page, err := m.Get("http://127.0.0.1:9881/metrics")
	if err != nil {
		return err
	}
	allowed := ""
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, `meshlet_gate_decisions_total{decision="allowed"} `); ok {
			allowed = v
		}
	}
	if allowed == "" || allowed == "0" {
		return fmt.Errorf("the container gate answered no container (meshlet_gate_decisions_total allowed %q)", allowed)
	}
	story.Printf("    container gate: CDI device %s/mesh=gate; the runtime ran meshlet-gate before the app container, meshlet answered allowed (meshlet_gate_decisions_total{decision=\"allowed\"} %s)\n",
		driver, allowed)

	// ztunnel's view, and the rules in the pod.
	sandbox, err := e.Crictl("pods", "-q", "--state", "ready", "--label", "io.kubernetes.pod.uid="+string(pod.UID))
	if err != nil || strings.TrimSpace(sandbox) == "" {
		return fmt.Errorf("the pod's sandbox: %q %v", sandbox, err)
	}
	info, err := e.InspectPod(strings.TrimSpace(sandbox))
	if err != nil {
		return err
	}
	ino, err := env.Inode(info.NetnsPath)
	if err != nil {
		return err
	}
	story.Println()
	story.Say("What ztunnel received for the pod:")
	adds := 0
	for _, r := range zt.Requests() {
		if r.Kind != zdstest.Add || r.UID != string(pod.UID) {
			continue
		}
		adds++
		match := "matches"
		if r.NetnsInode != ino {
			match = "DOES NOT match"
		}
		story.Printf("    Add uid=%s name=%s namespace=%s serviceAccount=%s, netns fd inode %d (%s the sandbox netns)\n",
			r.UID, r.Info.GetName(), r.Info.GetNamespace(), r.Info.GetServiceAccount(), r.NetnsInode, match)
		if r.NetnsInode != ino || r.Info.GetServiceAccount() != serviceAccount {
			return errors.New("ztunnel's Add does not describe the pod")
		}
	}
	if adds != 1 {
		return fmt.Errorf("ztunnel got %d Adds for the pod, want 1: %v", adds, zt.Requests())
	}
	story.Println()
	story.Say("Redirection in the pod's network namespace (nft list table inet meshlet, summarised):")
	table, err := exec.Command("nsenter", "--net="+info.NetnsPath, "nft", "list", "table", "inet", "meshlet").CombinedOutput()
	if err != nil {
		return fmt.Errorf("the pod has no meshlet table: %v: %s", err, table)
	}
	story.Print(summariseTable(string(table)))

	// Readiness: the device is tainted while ztunnel is away.
	story.Println()
	story.Say("Readiness: disconnecting the ztunnel stand-in…")
	start = time.Now()
	zt.Stop()
	if _, dev, err = waitDevice(ctx, c.Client, true); err != nil {
		return err
	}
	story.Printf("    device tainted %v later:\n", time.Since(start).Round(time.Millisecond))
	printDevice(dev)
	late := meshPod(podName + "-v2")
	if late, err = c.Client.CoreV1().Pods(namespace).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		return err
	}
	var unschedulable string
	if late, err = waitPod(ctx, c.Client, late, "Unschedulable", 30*time.Second, func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				unschedulable = cond.Message
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	story.Printf("    pod %s/%s created meanwhile: %s, PodScheduled=False %s: %q\n", namespace, late.Name, late.Status.Phase, corev1.PodReasonUnschedulable, unschedulable)
	start = time.Now()
	if zt, err = connectZtunnel(ctx, socket); err != nil {
		return err
	}
	if _, dev, err = waitDevice(ctx, c.Client, false); err != nil {
		return err
	}
	story.Printf("    ztunnel stand-in reconnected (snapshot replayed: %d Add); device untainted %v later: taints %s\n",
		zdstest.Count(zt.Requests(), zdstest.Add), time.Since(start).Round(time.Millisecond), taints(dev))
	if late, err = waitPod(ctx, c.Client, late, "Running", 90*time.Second, running); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := zt.WaitFor(wctx, func(rs []*zdstest.Request) bool { return hasRequest(rs, zdstest.Add, string(late.UID)) }); err != nil {
		return fmt.Errorf("ztunnel's Add for %s: %w", late.Name, err)
	}
	story.Printf("    pod %s scheduled once the device was untainted: Running %v after ztunnel reconnected, ztunnel got its Add\n",
		late.Name, time.Since(start).Round(time.Millisecond))

	// Deletion: the kubelet stops the pod (ztunnel gets Del) and
	// unprepares its claim.
	story.Println()
	story.Say("Deleting both pods…")
	if err := c.DeletePods(); err != nil {
		return err
	}
	podsDeleted = true
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	if err := zt.WaitFor(dctx, func(rs []*zdstest.Request) bool {
		return hasRequest(rs, zdstest.Del, string(pod.UID)) && hasRequest(rs, zdstest.Del, string(late.UID))
	}); err != nil {
		return fmt.Errorf("ztunnel's Del for the deleted pods: %w", err)
	}
	story.Printf("    ztunnel got Del uid=%s (%s) and Del uid=%s (%s)\n", pod.UID, pod.Name, late.UID, late.Name)
	if err := poll(ctx, 30*time.Second, "the claims unprepared", func() (bool, error) {
		s, err := claimstore.Open(e.MeshletStateDir())
		return err == nil && s.Len() == 0, err
	}); err != nil {
		return err
	}
	story.Printf("    claims unprepared: %s holds none\n", filepath.Join("<state-dir>", claimstore.FileName))
	if err := poll(ctx, 30*time.Second, "the claim deleted", func() (bool, error) {
		_, err := c.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, claimName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}); err != nil {
		return err
	}
	story.Printf("    claim %s deleted with its pod\n", claimName)
	story.Println()
	return nil
}

// meshPod is a pod that asks for the mesh as
// deploy/examples/mesh-by-resource.yaml does.
func meshPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, AutomountServiceAccountToken: new(bool), TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: env.Image, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"mesh.meshlet.dev/mesh": resource.MustParse("1")}}}}}}
}

// running: the pod runs with its container ready.
func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
}

func hasRequest(rs []*zdstest.Request, kind zdstest.Kind, uid string) bool {
	for _, r := range rs {
		if r.Kind == kind && r.UID == uid {
			return true
		}
	}
	return false
}

// applyDeviceClass creates the DeviceClass of the manifest.
func applyDeviceClass(ctx context.Context, client kubernetes.Interface, file string) (*resourceapi.DeviceClass, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if tm.Kind != "DeviceClass" {
			continue
		}
		var class resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(doc), &class); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		got, err := client.ResourceV1().DeviceClasses().Create(ctx, &class, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create DeviceClass: %w", err)
		}
		return got, nil
	}
	return nil, fmt.Errorf("no DeviceClass in %s", file)
}

// connectZtunnel connects a ztunnel stand-in and waits for the snapshot.
func connectZtunnel(ctx context.Context, socket string) (*zdstest.Ztunnel, error) {
	zt := &zdstest.Ztunnel{}
	if err := poll(ctx, 30*time.Second, "ztunnel's socket", func() (bool, error) {
		err := zt.Start(socket)
		return err == nil, err
	}); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := zt.WaitSnapshot(wctx); err != nil {
		zt.Stop()
		return nil, err
	}
	return zt, nil
}

// waitDevice waits for the node's mesh device to be published (un)tainted.
func waitDevice(ctx context.Context, client kubernetes.Interface, tainted bool) (*resourceapi.ResourceSlice, *resourceapi.Device, error) {
	var slice *resourceapi.ResourceSlice
	var dev *resourceapi.Device
	err := poll(ctx, 60*time.Second, fmt.Sprintf("the node's mesh device (tainted=%t)", tainted), func() (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range list.Items {
			s := &list.Items[i]
			if s.Spec.Driver != driver || deref(s.Spec.NodeName) != env.NodeName {
				continue
			}
			for j := range s.Spec.Devices {
				d := &s.Spec.Devices[j]
				if d.Name == draplugin.DeviceName && (len(d.Taints) > 0) == tainted {
					slice, dev = s, d
					return true, nil
				}
			}
		}
		return false, nil
	})
	return slice, dev, err
}

func printDevice(d *resourceapi.Device) {
	var attrs []string
	for name, a := range d.Attributes {
		switch {
		case a.StringValue != nil:
			attrs = append(attrs, fmt.Sprintf("%s=%s", name, *a.StringValue))
		case a.BoolValue != nil:
			attrs = append(attrs, fmt.Sprintf("%s=%t", name, *a.BoolValue))
		}
	}
	slices.Sort(attrs)
	story.Printf("    device %s: allowMultipleAllocations=%t, attributes %s, taints %s\n",
		d.Name, d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations, strings.Join(attrs, " "), taints(d))
}

func taints(d *resourceapi.Device) string {
	if len(d.Taints) == 0 {
		return "none (the node enrolls pods)"
	}
	var out []string
	for _, t := range d.Taints {
		out = append(out, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
	}
	return strings.Join(out, ", ")
}

// waitClaimEnrolled waits for the claim's Enrolled device condition.
func waitClaimEnrolled(ctx context.Context, client kubernetes.Interface, name string) (*resourceapi.ResourceClaim, error) {
	var claim *resourceapi.ResourceClaim
	err := poll(ctx, 30*time.Second, "claim "+name+" status.devices Enrolled=True", func() (bool, error) {
		rc, err := client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		claim = rc
		if rc.Status.Allocation == nil {
			return false, nil
		}
		for _, d := range rc.Status.Devices {
			for _, c := range d.Conditions {
				if d.Driver == driver && c.Type == draplugin.ConditionEnrolled && c.Status == metav1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, nil
	})
	return claim, err
}

// waitPod polls the pod until cond holds.
func waitPod(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, what string, timeout time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := poll(ctx, timeout, "pod "+p.Namespace+"/"+p.Name+" "+what, func() (bool, error) {
		got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = got
		return cond(got), nil
	})
	if err != nil && last != nil {
		var conds []string
		for _, c := range last.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
		}
		err = fmt.Errorf("%w; phase %s, conditions: %s", err, last.Status.Phase, strings.Join(conds, "; "))
	}
	return last, err
}

// poll calls cond every 50 ms until it holds, ctx ends or timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return fmt.Errorf("timed out after %v waiting for %s: %w", timeout, what, lastErr)
			}
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// summariseTable lists each chain of the table with its hook and its
// rule count, and the rules that send traffic to ztunnel's ports.
func summariseTable(table string) string {
	var b strings.Builder
	var chain, hook string
	rules := 0
	var key []string
	flush := func() {
		if chain != "" {
			fmt.Fprintf(&b, "    chain %-18s %-48s %d rule(s)\n", chain, hook, rules)
		}
	}
	for _, line := range strings.Split(table, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "chain "):
			flush()
			chain, hook, rules = strings.TrimSuffix(strings.TrimPrefix(l, "chain "), " {"), "", 0
		case strings.HasPrefix(l, "type "):
			hook, _, _ = strings.Cut(l, "; policy")
			hook = strings.TrimSuffix(hook, ";")
		case l == "}" || l == "" || strings.HasPrefix(l, "table ") || strings.HasPrefix(l, "policy "):
		case chain != "":
			rules++
			if strings.Contains(l, "redirect to") || strings.Contains(l, "tproxy") {
				key = append(key, l)
			}
		}
	}
	flush()
	for _, k := range key {
		fmt.Fprintf(&b, "    … %s\n", k)
	}
	return b.String()
}

func settings(dns, inbound *bool) string {
	var parts []string
	if dns != nil {
		parts = append(parts, fmt.Sprintf("dnsCapture=%t", *dns))
	}
	if inbound != nil {
		parts = append(parts, fmt.Sprintf("inboundCapture=%t", *inbound))
	}
	if len(parts) == 0 {
		return "none of its own: the node's defaults apply"
	}
	return strings.Join(parts, ", ")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
