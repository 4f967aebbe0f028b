package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestRunWaitsForTheAgentItReplaces: on a node where another agent
// (istio-cni's node agent) serves ztunnel's socket, meshlet leaves that
// live socket alone and says, not ready, what it waits for; once the other
// agent has gone it serves ztunnel itself.
func TestRunWaitsForTheAgentItReplaces(t *testing.T) {
	privtest.RequireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	node, err := netns.Open(netnstest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	dir := zdstest.SocketDir(t)
	cfg := DefaultConfig()
	cfg.Standalone = true
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.ZtunnelSocket = filepath.Join(dir, "run", "z.sock")
	cfg.NRI.SocketPath = filepath.Join(dir, "no-runtime.sock")
	cfg.HealthSocket = filepath.Join(dir, "health.sock")
	cfg.Redirect.HostNetnsFd = netnstest.Fd(t, node)
	cfg.HealthAddr, cfg.MetricsAddr = freePort(t), freePort(t)
	cfg.SnapshotHold = time.Second

	other, err := listenPacketAt(cfg.ZtunnelSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, cfg) }()
	readyz := func() string {
		var out strings.Builder
		if err := health.Probe(context.Background(), cfg.HealthSocket, "readyz", &out); err != nil {
			return err.Error()
		}
		return out.String()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz says %q", what, readyz())
			}
		}
	}
	waitFor("meshlet never said it waits for the other agent", func() bool {
		return strings.Contains(readyz(), "waiting for ztunnel's socket "+cfg.ZtunnelSocket+": another agent (istio-cni?) serves it")
	})
	// The other agent's socket is still its own.
	c, err := net.Dial("unixpacket", cfg.ZtunnelSocket)
	if err != nil {
		t.Fatalf("the other agent's socket was taken from it: %v", err)
	}
	c.Close()
	if _, err := other.Accept(); err != nil {
		t.Fatal(err)
	}

	other.Close() // the other agent exits
	var zt *zdstest.Client
	waitFor("meshlet never took ztunnel's socket", func() bool {
		zt, err = zdstest.Dial(cfg.ZtunnelSocket)
		return err == nil
	})
	defer zt.Close()
	if _, err := zt.ReadSnapshot(5 * time.Second); err != nil {
		t.Fatalf("ztunnel's snapshot from meshlet: %v", err)
	}
	waitFor("meshlet still says it waits", func() bool { return strings.Contains(readyz(), "NRI") })
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop")
	}
}

// listenPacketAt listens on a SEQPACKET socket at path, as another node
// agent serving ztunnel's socket would.
func listenPacketAt(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
}
