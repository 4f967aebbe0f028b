package cri_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
)

// startContainerd starts the e2e harness's containerd (no NRI plugin
// required) and tears it down after the test.
func startContainerd(t *testing.T) *env.Env {
	t.Helper()
	privtest.RequireRoot(t)
	bin := privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directory test/env/install-runtime.sh prints; `make test` sets it")
	// Not t.TempDir: containerd's socket paths under it would pass the
	// 108-byte limit of a Unix socket path.
	dir, err := os.MkdirTemp("", "mlcri")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e, err := env.Start(env.Options{BinDir: bin, Dir: dir, Logf: t.Logf})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("e2e environment: %v", err)
	}
	t.Logf("containerd environment up in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("e2e teardown: %v", err)
		}
		if t.Failed() {
			t.Logf("logs kept in %s/logs", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return e
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

func byUID(pods []enroll.Pod) map[string]enroll.Pod {
	m := map[string]enroll.Pod{}
	for _, p := range pods {
		m[p.UID] = p
	}
	return m
}

// TestRunningPodsOnContainerd lists real sandboxes of a real containerd:
// a pod-network pod and a host-network pod, then the first stopped
// (NOTREADY) and removed.
func TestRunningPodsOnContainerd(t *testing.T) {
	e := startContainerd(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	found, err := cri.Find(ctx, []string{"/nonexistent/containerd.sock", e.CRISocket})
	if err != nil || found != e.CRISocket {
		t.Fatalf("Find = %q, %v; want %q", found, err, e.CRISocket)
	}
	l, err := cri.Dial(ctx, "unix://"+e.CRISocket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	name, version := l.Runtime()
	t.Logf("runtime %s %s", name, version)
	// A release says v2.x.y; a go-installed build 2.x.y+unknown.
	if name != "containerd" || !strings.HasPrefix(strings.TrimPrefix(version, "v"), "2.") {
		t.Errorf("Runtime() = %q, %q; want containerd v2.x", name, version)
	}

	if pods, _, err := l.RunningPods(ctx); err != nil || pods == nil || len(pods) != 0 {
		t.Fatalf("RunningPods before any pod = %v, %v; want an empty, non-nil list", pods, err)
	}

	suffix := fmt.Sprint(os.Getpid())
	web := env.PodSpec{Name: "web", Namespace: "shop", UID: "cri-web-" + suffix,
		Labels:      map[string]string{"app": "web", "istio.io/dataplane-mode": "ambient"},
		Annotations: map[string]string{"meshlet.test/note": "pod network"}}
	agent := env.PodSpec{Name: "agent", Namespace: "kube-system", UID: "cri-agent-" + suffix,
		Labels: map[string]string{"app": "agent"}, HostNetwork: true}
	webID, err := e.RunPod(web)
	if err != nil {
		t.Fatal(err)
	}
	agentID, err := e.RunPod(agent)
	if err != nil {
		t.Fatal(err)
	}
	webInfo, err := e.InspectPod(webID)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	pods, _, err := l.RunningPods(ctx)
	t.Logf("RunningPods with 2 sandboxes: %v", time.Since(start).Round(time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	got := byUID(pods)
	if len(pods) != 2 || len(got) != 2 {
		t.Fatalf("RunningPods = %+v; want the pods %s and %s", pods, web.UID, agent.UID)
	}

	w := got[web.UID]
	if w.Name != web.Name || w.Namespace != web.Namespace || w.HostNetwork || w.RuntimeHandler != "" {
		t.Errorf("web pod = %+v", w)
	}
	if !maps.Equal(w.Labels, web.Labels) || !maps.Equal(w.Annotations, web.Annotations) {
		t.Errorf("web pod labels %v annotations %v; want %v, %v", w.Labels, w.Annotations, web.Labels, web.Annotations)
	}
	// The path is the runtime's; the namespace must be the one the
	// sandbox's pause process lives in.
	if webInfo.Pid == 0 {
		t.Fatalf("crictl inspectp reports no pause pid for %s", webID)
	}
	if w.NetnsPath == "" || w.NetnsPath != webInfo.NetnsPath {
		t.Errorf("web NetnsPath = %q; crictl inspectp says %q", w.NetnsPath, webInfo.NetnsPath)
	} else if got, want := inode(t, w.NetnsPath), inode(t, fmt.Sprintf("/proc/%d/ns/net", webInfo.Pid)); got != want {
		t.Errorf("web NetnsPath %s is netns inode %d; the pause process (pid %d) is in %d", w.NetnsPath, got, webInfo.Pid, want)
	}
	wantIP, err := netip.ParseAddr(webInfo.IP)
	if err != nil || !netip.MustParsePrefix(env.Subnet).Contains(wantIP) {
		t.Fatalf("crictl inspectp IP %q (%v) not in %s", webInfo.IP, err, env.Subnet)
	}
	if !slices.Equal(w.IPs, []netip.Addr{wantIP}) {
		t.Errorf("web IPs = %v; want [%v]", w.IPs, wantIP)
	}

	a := got[agent.UID]
	if a.Name != agent.Name || a.Namespace != agent.Namespace || !a.HostNetwork || a.NetnsPath != "" ||
		len(a.IPs) != 0 || !maps.Equal(a.Labels, agent.Labels) {
		t.Errorf("host-network pod = %+v", a)
	}

	// Stopped: the sandbox is NOTREADY, its netns gone; not a running pod.
	if err := e.StopPod(webID); err != nil {
		t.Fatal(err)
	}
	if info, err := e.InspectPod(webID); err != nil || info.State != "SANDBOX_NOTREADY" {
		t.Fatalf("stopped sandbox state = %q, %v; want SANDBOX_NOTREADY", info.State, err)
	}
	pods, _, err = l.RunningPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := byUID(pods); len(pods) != 1 || got[agent.UID].UID == "" {
		t.Errorf("after stopping %s: RunningPods = %+v; want only %s", web.UID, pods, agent.UID)
	}

	if err := e.RemovePod(webID); err != nil {
		t.Fatal(err)
	}
	pods, _, err = l.RunningPods(ctx)
	if err != nil || len(pods) != 1 || pods[0].UID != agent.UID {
		t.Errorf("after removing %s: RunningPods = %+v, %v; want only %s", web.UID, pods, err, agent.UID)
	}
	if err := e.RemovePod(agentID); err != nil {
		t.Fatal(err)
	}
	if pods, _, err = l.RunningPods(ctx); err != nil || pods == nil || len(pods) != 0 {
		t.Errorf("after removing every pod: RunningPods = %+v, %v; want an empty list", pods, err)
	}
}
