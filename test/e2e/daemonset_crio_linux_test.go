package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
	"github.com/meshlet/meshlet/test/env/clusterenv"
)

// TestDaemonSetOnCRIO: the chart with platform=crio, on a node whose
// kubelet runs pods on CRI-O (built from source, NRI on): meshlet's image
// loaded into CRI-O's store, the DaemonSet Ready, a mesh pod by label and
// one by resource (DRA, with the container gate on CRI-O's CDI) enrolled,
// each once and in its own netns; helm uninstall --cascade=foreground
// --wait returns with meshlet gone and the node clean. The test runtime's
// private paths override the platform's (which are the chart tests' to
// check, golden files): this checks the chart's DaemonSet on CRI-O.
func TestDaemonSetOnCRIO(t *testing.T) {
	e := privateRuntimeEnv(t, env.CRIO, "MESHLET_CRIO_BIN", "test/env/install-crio.sh")
	c := startClusterOn(t, e, clusterenv.Options{})
	buildImageInto(t, e, "e2e-crio", false)
	ctx := context.Background()
	ns := "crio-mesh"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: ambient}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace's default service account", func() bool {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	start := time.Now()
	r := newReleaseOn(t, c, e)
	r.chartValues = map[string]any{"platform": "crio"}
	r.install("e2e-crio", nil)
	installed := r.waitRolledOut("e2e-crio")
	t.Logf("helm install (platform crio) to meshlet's pod Ready on CRI-O: %v", time.Since(start).Round(10*time.Millisecond))
	if log := podLog(t, installed, "check-nri"); !strings.Contains(log, "NRI is enabled: the runtime answers on") {
		t.Errorf("the check-nri init container's log: %q, want it to say NRI is enabled", log)
	}
	m := r.connectZtunnel()

	byLabel := ambientPod(t, c, ns, "by-label")
	byResource := meshPodByResource("by-resource")
	byResource.Namespace = ns
	byResource = createPod(t, c, byResource)
	for _, p := range []*corev1.Pod{byLabel, byResource} {
		waitPod(t, c, p, "Running", running)
		m.waitFor("the pod's Add", func([]*zdstest.Request) bool { return len(m.adds(string(p.UID))) > 0 })
		_, netns := podSandboxIn(t, e, p)
		if adds := m.adds(string(p.UID)); len(adds) != 1 || adds[0].NetnsInode != inode(t, netns) {
			t.Fatalf("ztunnel got %v for pod %s, want one Add with its netns", adds, p.Name)
		}
		if !hasRules(t, netns) {
			t.Fatalf("pod %s: no meshlet rules in its netns", p.Name)
		}
	}

	r.mustHelm("uninstall", "meshlet", "-n", meshletNamespace, "--cascade=foreground", "--wait")
	if pods, err := c.Client.CoreV1().Pods(meshletNamespace).List(ctx, meshletPods); err != nil || len(pods.Items) != 0 {
		t.Fatalf("helm uninstall --cascade=foreground --wait returned with meshlet's pods %v (%v)", pods, err)
	}
	r.nodeClean("the uninstall on CRI-O")
}

// privateRuntimeEnv starts an environment of runtime rt of the test's own
// (a kubelet garbage-collects the sandboxes it does not know, so the
// shared ones would lose their tests' pods), from the binaries in the
// directory variable binVar names.
func privateRuntimeEnv(t *testing.T, rt env.Runtime, binVar, installer string) *env.Env {
	t.Helper()
	bin := privtest.RequireEnv(t, binVar, fmt.Sprintf("%s tests need the directory %s prints; `make test` sets it", rt, installer))
	dir, err := os.MkdirTemp("", "mlds-"+string(rt)) // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	// A shared mount, as / is on a node booted by systemd (this machine's
	// is private): CRI-O mounts a host path that holds its storage root
	// (here the runtime's socket directories do) HostToContainer, and
	// refuses a source on a private mount.
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount %s: %v", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	e, err := env.Start(env.Options{BinDir: theEnv(t).BinDir(), Runtime: rt, RuntimeBinDir: bin, Dir: dir, Logf: t.Logf})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("%s did not start: %v", rt, err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("%s teardown: %v", rt, err)
		}
		if t.Failed() {
			t.Logf("%s logs kept in %s/logs", rt, dir)
			return
		}
		os.RemoveAll(dir)
	})
	return e
}
