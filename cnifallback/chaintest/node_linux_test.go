package chaintest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// podSubnet is the pod network's range (TEST-NET-2): each node has its own
// namespace, bridge and host-local store, so nodes never share it.
const podSubnet = "198.51.100.0/24"

// bridgeSeq numbers the bridges of this process: a bridge lives in its
// node's namespace, but its name is still unique on the machine
// (process id and sequence), so nothing could mistake it for another's.
var bridgeSeq atomic.Uint32

// node is what a container runtime's host side is to the chain: a network
// namespace of the test's own, where libcni runs the plugins (they inherit
// it), the bridge and the pods' host-side veths live, and the redirector
// keeps its node-side rules. It goes with the test, and all of that with
// it; the test process's own namespace is never touched.
type node struct {
	ns      *netns.Handle
	bridge  string
	dataDir string // host-local's allocations
	cache   string // libcni's cached results (CHECK and DEL read them)
	exec    *recorder
}

func newNode(t testing.TB) *node {
	t.Helper()
	dir := t.TempDir()
	return &node{ns: netnstest.Open(t), bridge: fmt.Sprintf("mlc%x%x", os.Getpid(), bridgeSeq.Add(1)),
		dataDir: filepath.Join(dir, "ipam"), cache: filepath.Join(dir, "cache"), exec: newRecorder()}
}

// cni is libcni running the plugins of dir.
func (n *node) cni(dir string) *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{dir}, n.cache, n.exec)
}

// in runs fn on a thread locked into the node's namespace: what fn execs
// starts there.
func (n *node) in(fn func() error) error { return netnstest.Run(n.ns, fn) }

// add runs the conflist's ADD from the node and returns its result and how
// long libcni took (measured on the node's thread: entering the namespace
// is not part of it).
func (n *node) add(ctx context.Context, c *libcni.CNIConfig, list *libcni.NetworkConfigList, p *pod) (types.Result, time.Duration, error) {
	var res types.Result
	var took time.Duration
	err := n.in(func() error {
		start := time.Now()
		var err error
		res, err = c.AddNetworkList(ctx, list, p.runtimeConf())
		took = time.Since(start)
		return err
	})
	return res, took, err
}

func (n *node) check(ctx context.Context, c *libcni.CNIConfig, list *libcni.NetworkConfigList, p *pod) error {
	return n.in(func() error { return c.CheckNetworkList(ctx, list, p.runtimeConf()) })
}

func (n *node) del(ctx context.Context, c *libcni.CNIConfig, list *libcni.NetworkConfigList, p *pod) error {
	return n.in(func() error { return c.DelNetworkList(ctx, list, p.runtimeConf()) })
}

// delOnFailure DELs the pod when the test fails before its own DEL: a
// pod left enrolled would hold its namespace past the test.
func (n *node) delOnFailure(t testing.TB, c *libcni.CNIConfig, list *libcni.NetworkConfigList, p *pod) {
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = n.del(ctx, c, list, p)
		}
	})
}

// conflist is the pod network: bridge with host-local, then, when meshlet
// is not nil, meshlet-cni with those settings (agentSocket, agentTimeout,
// excludeNamespaces).
func (n *node) conflist(t testing.TB, v string, meshlet map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	plugins := []map[string]any{{
		"type": "bridge", "bridge": n.bridge, "isGateway": true, "ipMasq": false,
		"ipam": map[string]any{"type": "host-local", "dataDir": n.dataDir,
			"ranges": [][]map[string]any{{{"subnet": podSubnet}}}, "routes": []map[string]any{{"dst": "0.0.0.0/0"}}},
	}}
	if meshlet != nil {
		entry := map[string]any{"type": "meshlet-cni"}
		for k, val := range meshlet {
			entry[k] = val
		}
		plugins = append(plugins, entry)
	}
	b, err := json.Marshal(map[string]any{"cniVersion": v, "name": "mlchain", "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("conflist %s: %v", b, err)
	}
	return list
}

// call is one plugin run as the recorder saw it.
type call struct {
	plugin, command string
	stdin, stdout   []byte
	took            time.Duration
}

// recorder is libcni's own exec, keeping what each plugin was given and
// printed: the result meshlet-cni is given is the bridge's output, which
// is what the chain without meshlet-cni returns.
type recorder struct {
	*invoke.DefaultExec
	mu    sync.Mutex
	calls []call
}

func newRecorder() *recorder {
	return &recorder{DefaultExec: &invoke.DefaultExec{RawExec: &invoke.RawExec{}, PluginDecoder: version.PluginDecoder{}}}
}

func (r *recorder) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	start := time.Now()
	out, err := r.RawExec.ExecPlugin(ctx, path, stdin, env)
	c := call{plugin: filepath.Base(path), stdin: stdin, stdout: out, took: time.Since(start)}
	for _, e := range env {
		if cmd, ok := strings.CutPrefix(e, "CNI_COMMAND="); ok {
			c.command = cmd
		}
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	return out, err
}

// last returns the last run of plugin with command; it fails the test if
// there was none.
func (r *recorder) last(t testing.TB, plugin, command string) call {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.calls) - 1; i >= 0; i-- {
		if c := r.calls[i]; c.plugin == plugin && c.command == command {
			return c
		}
	}
	t.Fatalf("%s was never run with %s", plugin, command)
	return call{}
}

// ran says how many times plugin was run with command.
func (r *recorder) ran(plugin, command string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.plugin == plugin && c.command == command {
			n++
		}
	}
	return n
}

// forget drops the calls recorded so far (the benchmark's loop).
func (r *recorder) forget() {
	r.mu.Lock()
	r.calls = r.calls[:0]
	r.mu.Unlock()
}
