package chaintest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/cnifallback/server"
)

// Namespaces of the tests' pods: the policy selects meshNS by its label,
// as a cluster's namespace labelled istio.io/dataplane-mode=ambient.
const (
	meshNS  = "shop"
	plainNS = "plain"
)

// namespaceLabels resolves pods as the API server would: the namespace's
// labels, the default service account.
type namespaceLabels map[string]map[string]string

func (n namespaceLabels) Resolve(_ context.Context, pod *enroll.Pod) (enroll.PodInfo, error) {
	return enroll.PodInfo{ServiceAccount: enroll.DefaultServiceAccount, NamespaceLabels: n[pod.Namespace]}, nil
}

type noStatus struct{}

func (noStatus) Report(enroll.PodRef, enroll.RedirectionStatus) {}

// netnsOpener is the core's opener as the daemon has it (agent/netns).
type netnsOpener struct{}

func (netnsOpener) Open(path string) (enroll.Netns, error) {
	h, err := netns.Open(path)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// countingCore is the real core, counting what reaches it from the CNI
// server (a refused request must not) and timing each Enroll (the
// agent's share of meshlet-cni's cost).
type countingCore struct {
	*enroll.Core
	enrolls, forgets atomic.Int64
	mu               sync.Mutex
	took             []time.Duration
}

func (c *countingCore) Enroll(ctx context.Context, pod enroll.Pod) (enroll.Result, error) {
	c.enrolls.Add(1)
	start := time.Now()
	defer func() {
		c.mu.Lock()
		c.took = append(c.took, time.Since(start))
		c.mu.Unlock()
	}()
	return c.Core.Enroll(ctx, pod)
}

// enrollTimes returns and forgets the Enroll durations so far.
func (c *countingCore) enrollTimes() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.took
	c.took = nil
	return out
}

func (c *countingCore) Forget(ctx context.Context, uid, sandboxID string) error {
	c.forgets.Add(1)
	return c.Core.Forget(ctx, uid, sandboxID)
}

// agent is meshlet's node agent in the test process, as the daemon wires
// it, with its node-side rules in the test's node namespace.
type agent struct {
	core    *countingCore
	zds     *zds.Server
	zt      *zdstest.Ztunnel
	socket  string // the CNI server's: meshlet-cni's agentSocket
	stopCNI func()
}

func startAgent(t testing.TB, n *node) *agent {
	t.Helper()
	ctx := agentContext(t)
	// Sockets: a short directory (paths are limited to 108 bytes).
	dir, err := os.MkdirTemp("", "mlchain-agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	zs, err := zds.Listen(zds.Config{SocketPath: filepath.Join(dir, "z.sock")})
	if err != nil {
		t.Fatal(err)
	}
	zctx, zcancel := context.WithCancel(ctx)
	zdone := make(chan error, 1)
	go func() { zdone <- zs.Serve(zctx) }()
	t.Cleanup(func() {
		zcancel()
		if err := <-zdone; err != nil {
			t.Errorf("ZDS server: %v", err)
		}
		zs.Close()
	})

	pol, err := policy.New(policy.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	rcfg := redirect.DefaultConfig()
	rcfg.HostNetnsFd = netnstest.Fd(t, n.ns) // the node's probe SNAT goes in the node's namespace
	redir, err := redirect.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { redir.Close() })
	resolver := namespaceLabels{meshNS: {policy.DataplaneModeLabel: policy.DataplaneModeAmbient}}
	core, err := enroll.New(enroll.Ports{Resolver: resolver, Policy: pol, Settings: []enroll.SettingsSource{pol},
		Opener: netnsOpener{}, Redirector: redir, Proxy: zs, Status: noStatus{}},
		enroll.Config{Defaults: enroll.Settings{DNSCapture: true}}) // the daemon's default
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{core: &countingCore{Core: core}, zds: zs, socket: filepath.Join(dir, "cni.sock")}

	cs, err := server.Listen(server.Config{SocketPath: a.socket}, a.core)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	cdone := make(chan error, 1)
	go func() { cdone <- cs.Serve(cctx) }()
	var once sync.Once
	a.stopCNI = func() {
		once.Do(func() {
			ccancel()
			if err := <-cdone; err != nil {
				t.Errorf("CNI server: %v", err)
			}
			cs.Close()
		})
	}
	t.Cleanup(a.stopCNI)

	a.zt = &zdstest.Ztunnel{}
	if err := a.zt.Start(zs.Addr()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.zt.Stop)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.zt.WaitSnapshot(wctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// agentContext logs the agent to the test's log; a benchmark's logs as
// the daemon does by default (no per-pod debug lines on the measured path).
func agentContext(t testing.TB) context.Context {
	if _, ok := t.(*testing.B); ok {
		return context.Background()
	}
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

// meshlet is meshlet-cni's conflist entry for this agent.
func (a *agent) meshlet(extra map[string]any) map[string]any {
	m := map[string]any{"agentSocket": a.socket, "agentTimeout": "5s"}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// stopZtunnel disconnects the stand-in and waits until the agent saw it go.
func (a *agent) stopZtunnel(t testing.TB) {
	t.Helper()
	a.zt.Stop()
	for deadline := time.Now().Add(5 * time.Second); a.zds.Connections() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ZDS server still has a connection after ztunnel left")
		}
	}
}

// requests returns the stand-in's requests of kind k for uid.
func (a *agent) requests(uid string, k zdstest.Kind) []*zdstest.Request {
	var out []*zdstest.Request
	for _, r := range a.zt.Requests() {
		if r.UID == uid && r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}
