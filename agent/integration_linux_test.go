package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

type noStatus struct{}

func (noStatus) Report(enroll.PodRef, enroll.RedirectionStatus) {}

// podFds counts the fds held on the pods' namespaces.
func podFds(t *testing.T, pods []enroll.Pod) int {
	n := 0
	for _, p := range pods {
		var st unix.Stat_t
		if err := unix.Stat(p.NetnsPath, &st); err != nil {
			t.Fatal(err)
		}
		held, err := netnstest.HeldNetns(0)
		if err != nil {
			t.Fatal(err)
		}
		n += held[st.Ino]
	}
	return n
}

// TestCoreWithRealZDSAndNamespaces: pods enrolled by the core get real
// redirection rules in their own namespaces and reach a ztunnel stand-in
// over the real socket with fds of those namespaces; a reconnecting ztunnel
// gets them all back; release sends Del, clears the node's probe SNAT and
// closes every fd.
func TestCoreWithRealZDSAndNamespaces(t *testing.T) {
	privtest.RequireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	parts := realCore(ctx, t)
	core, server, node := parts.core, parts.server, parts.node
	ambient := map[string]string{policy.DataplaneModeLabel: policy.DataplaneModeAmbient}
	ip := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	pods := []enroll.Pod{
		{UID: "uid-a", Name: "a", Namespace: "app", Labels: ambient, NetnsPath: netnstest.NewWithAddrs(t, ip("192.0.2.10")...), IPs: ip("192.0.2.10")},
		{UID: "uid-b", Name: "b", Namespace: "app", Labels: ambient, NetnsPath: netnstest.NewWithAddrs(t, ip("192.0.2.11")...), IPs: ip("192.0.2.11")},
		{UID: "uid-plain", Name: "plain", Namespace: "app", NetnsPath: netnstest.NewWithAddrs(t, ip("192.0.2.12")...), IPs: ip("192.0.2.12")},
	}

	// No ztunnel yet: a mesh pod must not be reported enrolled.
	_, err := core.Enroll(ctx, pods[0])
	if enroll.FailedStep(err) != enroll.StepProxy {
		t.Fatalf("Enroll without ztunnel = %v, want a ztunnel failure", err)
	}
	// The error names the pod once, the step and the cause, as every port
	// leaves the pod's name to the core.
	if want := "enroll pod uid-a: ztunnel: zds add: no ztunnel connected"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	if got := podFds(t, pods); got != 0 {
		t.Fatalf("failed enrollment left %d fds on pod namespaces open", got)
	}

	zt := &zdstest.Ztunnel{}
	if err := zt.Start(server.Addr()); err != nil {
		t.Fatal(err)
	}
	waitCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if err := zt.WaitSnapshot(waitCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Reconcile(ctx, pods); err != nil {
		t.Fatal(err)
	}
	// Running pods are handed to ztunnel in the background.
	if err := zt.WaitFor(waitCtx, func(rs []*zdstest.Request) bool { return zdstest.Count(rs, zdstest.Add) == 2 }); err != nil {
		t.Fatal(err)
	}
	// Per enrolled pod: the core's handle, the ZDS server's dup for
	// replays, and the fd the in-process ztunnel stand-in received; the
	// redirector's look for istio-cni's rules in running pods holds one
	// more while it runs.
	parts.redir.Settle()
	if got := podFds(t, pods); got != 2*3 {
		t.Fatalf("%d fds held on pod namespaces, want 6 (core, ZDS replay dup, ztunnel for each of 2 pods)", got)
	}
	adds := zdstest.AddedInodes(zt.Requests())
	for _, r := range zt.Requests() {
		if r.Kind == zdstest.Add && (r.Info.GetServiceAccount() != "default" || r.Info.GetNamespace() != "app") {
			t.Errorf("add %s: workload info %v", r.UID, r.Info)
		}
	}
	for _, p := range pods[:2] {
		st, _ := core.Status(p.UID)
		if st.State != enroll.StateEnrolled || adds[p.UID] != st.NetnsInode || st.NetnsInode == 0 {
			t.Errorf("pod %s: state %s inode %d, ztunnel got inode %d", p.Name, st.State, st.NetnsInode, adds[p.UID])
		}
	}
	if _, ok := adds["uid-plain"]; ok || len(adds) != 2 {
		t.Fatalf("ztunnel got adds %v, want exactly the two mesh pods", adds)
	}
	for _, p := range pods {
		has := hasMeshletTable(t, p.NetnsPath)
		if want := p.Name != "plain"; has != want {
			t.Errorf("pod %s: redirection table present %t, want %t", p.Name, has, want)
		}
	}
	if got := nodeSNATSet(t, node); !strings.Contains(got, "192.0.2.10") || !strings.Contains(got, "192.0.2.11") || strings.Contains(got, "192.0.2.12") {
		t.Errorf("node probe SNAT set does not hold exactly the mesh pods:\n%s", got)
	}

	// A sandbox whose namespace does not hold the pod's IP (a runtime or
	// CNI fault) is refused before anything is programmed.
	misplaced := enroll.Pod{UID: "uid-misplaced", Name: "misplaced", Namespace: "app", Labels: ambient,
		NetnsPath: netnstest.NewWithAddrs(t, ip("192.0.2.20")...), IPs: ip("192.0.2.13")}
	_, err = core.Enroll(ctx, misplaced)
	if enroll.FailedStep(err) != enroll.StepNetns || !errors.Is(err, netns.ErrAddrsMissing) || !strings.Contains(err.Error(), "192.0.2.13") {
		t.Fatalf("Enroll of a pod whose namespace lacks its IP = %v; want a netns failure naming 192.0.2.13", err)
	}
	if _, added := zdstest.AddedInodes(zt.Requests())[misplaced.UID]; added || hasMeshletTable(t, misplaced.NetnsPath) ||
		strings.Contains(nodeSNATSet(t, node), "192.0.2.13") || podFds(t, []enroll.Pod{misplaced}) != 0 {
		t.Fatal("the refused pod left something behind: a ztunnel Add, its table, a node SNAT entry or an open namespace")
	}
	if err := core.Forget(ctx, misplaced.UID, misplaced.SandboxID); err != nil {
		t.Fatal(err)
	}

	// ztunnel restarts: the new connection is replayed both pods.
	zt.Stop()
	zt2 := &zdstest.Ztunnel{}
	if err := zt2.Start(server.Addr()); err != nil {
		t.Fatal(err)
	}
	defer zt2.Stop()
	if err := zt2.WaitSnapshot(waitCtx); err != nil {
		t.Fatal(err)
	}
	replayed := zdstest.AddedInodes(zt2.Requests())
	if len(replayed) != 2 || replayed["uid-a"] != adds["uid-a"] || replayed["uid-b"] != adds["uid-b"] {
		t.Fatalf("replay %v, want %v", replayed, adds)
	}

	// Pods stop: Del each, every held fd closed.
	if _, err := core.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if dels := zdstest.Count(zt2.Requests(), zdstest.Del); dels != 2 {
		t.Fatalf("ztunnel got %d dels, want 2", dels)
	}
	if got := nodeSNATSet(t, node); strings.Contains(got, "192.0.2.1") {
		t.Errorf("released pods still in the node probe SNAT set:\n%s", got)
	}
	zt2.Stop()
	// The server closes its end of the connection when it reads EOF.
	for deadline := time.Now().Add(5 * time.Second); server.Connections() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("server still has a connection after ztunnel left")
		}
	}
	if got := podFds(t, pods); got != 0 {
		t.Fatalf("%d fds on pod namespaces still open after all pods left", got)
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(t *testing.T, url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunServesUntilCancelled runs the daemon without a container runtime:
// it serves ZDS, is alive but not ready (naming why), exports metrics, and
// stops cleanly on cancellation, removing its socket; a second daemon on
// the same node waits as a ready standby and takes over when it exits.
func TestRunServesUntilCancelled(t *testing.T) {
	privtest.RequireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	node, err := netns.Open(netnstest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	cfg := DefaultConfig()
	dir := zdstest.SocketDir(t)
	cfg.Standalone = true
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.ZtunnelSocket = filepath.Join(dir, "run", "z.sock")
	cfg.NRI.SocketPath = filepath.Join(dir, "no-runtime.sock")
	cfg.Redirect.HostNetnsFd = netnstest.Fd(t, node) // never the real node's tables
	cfg.HealthAddr, cfg.MetricsAddr = freePort(t), freePort(t)
	cfg.SnapshotHold = time.Second
	// A previous agent's checkpoint: this run never reaches a runtime, so
	// it has nothing better to say and must leave the file as it is; and
	// ztunnel, once the snapshot's hold is over, is told to keep the pod
	// the previous agent handed it.
	previous := []enroll.Record{{UID: "running", NetnsInode: 7, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.7")},
		Redirection: "nftables/v1 ipv4 inbound-capture"}}
	bootID, err := state.BootID()
	if err != nil {
		t.Fatal(err)
	}
	if err := state.Save(cfg.StateDir, bootID, previous); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, cfg) }()
	var c *zdstest.Client
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if c, err = zdstest.Dial(cfg.ZtunnelSocket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon never listened: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer c.Close()
	snap, err := c.ReadSnapshot(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != 1 || snap[0].Kind != zdstest.Keep || snap[0].UID != "running" {
		t.Fatalf("snapshot %v, want keep running: the previous agent's pod", snap)
	}
	if code, _ := httpGet(t, "http://"+cfg.HealthAddr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := httpGet(t, "http://"+cfg.HealthAddr+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NRI") {
		t.Errorf("/readyz without a runtime = %d %q, want 503 naming NRI", code, body)
	}
	if _, body := httpGet(t, "http://"+cfg.MetricsAddr+"/metrics"); !strings.Contains(body, "meshlet_ztunnel_connections 1") ||
		!strings.Contains(body, "meshlet_runtime_connected 0") || !strings.Contains(body, `meshlet_enroll_failures_total{step="ztunnel"} 0`) {
		t.Errorf("/metrics lacks meshlet's metrics:\n%s", body)
	}

	// A second meshlet on the node (a surge update) waits for the node
	// lock, probed on its own health socket: not ready while it could not
	// take the node over (its runtime does not answer), a ready standby
	// once it could; it serves once the first exits, on the same ports.
	next := cfg
	next.HealthSocket = filepath.Join(dir, "next", "health.sock")
	next.NRI.SocketPath = filepath.Join(dir, "next", "nri.sock")
	nextCtx, nextCancel := context.WithCancel(context.Background())
	defer nextCancel()
	nextErr := make(chan error, 1)
	go func() { nextErr <- Run(nextCtx, next) }()
	probe := func(c Config) (string, error) {
		var out strings.Builder
		err := health.Probe(context.Background(), c.HealthSocket, "readyz", &out)
		return out.String(), err
	}
	var answer string
	err = nil
	for deadline := time.Now().Add(5 * time.Second); err == nil || !strings.Contains(err.Error(), "cannot take the node over: the runtime's NRI socket"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second meshlet's readiness without a runtime: %q, %v; want 503 naming the NRI socket", answer, err)
		}
		answer, err = probe(next)
	}
	// Something answers on its NRI socket now (and hangs up: the first
	// meshlet still serves the node).
	nri, err := net.Listen("unix", next.NRI.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer nri.Close()
	go func() {
		for {
			c, err := nri.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for deadline := time.Now().Add(3 * health.StandbyInterval); answer != "ok: "+health.StandbyDetail+"\n"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second meshlet's readiness while the first serves: %q, %v; want ok (standby)", answer, err)
		}
		answer, err = probe(next)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); err == nil || !strings.Contains(err.Error(), "NRI"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second meshlet's readiness after the first exited: %q, %v; want 503 naming NRI (it serves, without a runtime)", answer, err)
		}
		answer, err = probe(next)
	}
	if code, body := httpGet(t, "http://"+cfg.HealthAddr+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NRI") {
		t.Errorf("/readyz on the node's health port from the second meshlet = %d %q, want 503 naming NRI", code, body)
	}
	nextCancel()
	if err := <-nextErr; err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if _, err := os.Stat(next.HealthSocket); !os.IsNotExist(err) {
		t.Errorf("health socket left behind: %v", err)
	}
	if _, err := os.Stat(cfg.ZtunnelSocket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	if cp, err := state.Load(cfg.StateDir); err != nil || !reflect.DeepEqual(cp.Pods, previous) {
		t.Fatalf("checkpoint after a run that never reached the runtime: %+v, %v; want the previous agent's kept", cp, err)
	}
}

func nftIn(t *testing.T, h *netns.Handle, args ...string) (string, error) {
	var out []byte
	err := netnstest.Run(h, func() error {
		var err error
		out, err = exec.Command("nft", args...).CombinedOutput()
		return err
	})
	return string(out), err
}

func hasMeshletTable(t *testing.T, path string) bool {
	h, err := netns.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = nftIn(t, h, "list", "table", "inet", redirect.TableName)
	return err == nil
}

func nodeSNATSet(t *testing.T, node *netns.Handle) string {
	out, err := nftIn(t, node, "list", "table", "inet", redirect.TableName)
	if err != nil {
		t.Fatalf("node table: %v\n%s", err, out)
	}
	return out
}
