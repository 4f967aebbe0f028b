package install

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

const (
	testSocket = "/var/run/meshlet/cni.sock"
	// reassertBound is the promise: meshlet is back within a second.
	reassertBound = time.Second
	// waitBound bounds a wait for something that must happen: generous,
	// because make test runs these tests beside the end-to-end tests on a
	// loaded machine. The promise itself is checked on the latency meshlet
	// reports (TestRunReasserts) and measured by the benchmark.
	waitBound = 10 * time.Second
)

// env is a node's CNI directories in a temporary directory.
type env struct {
	confDir, binDir, plugin string
}

func newEnv(t testing.TB) env {
	t.Helper()
	root := t.TempDir()
	e := env{
		confDir: filepath.Join(root, "net.d"),
		binDir:  filepath.Join(root, "bin"),
		plugin:  filepath.Join(root, "image", "meshlet-cni"),
	}
	for _, d := range []string{e.confDir, e.binDir, filepath.Dir(e.plugin)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, e.plugin, []byte("#!/bin/sh\n# meshlet-cni stand-in\nexit 0\n"), 0o755)
	// The primaries' plugins the tests' configs run, where the runtime
	// would find them (the installer refuses a BinDir without them).
	for _, p := range stubPlugins {
		writeFile(t, filepath.Join(e.binDir, p), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	}
	return e
}

// binExtras lists binDir's files other than the primaries' plugins.
func (e env) binExtras(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir(e.binDir)
	if err != nil {
		t.Fatal(err)
	}
	var extra []string
	for _, ent := range ents {
		if !slices.Contains(stubPlugins, ent.Name()) {
			extra = append(extra, ent.Name())
		}
	}
	return extra
}

// stubPlugins are the plugin types of the tests' primary configs.
var stubPlugins = []string{"bandwidth", "bridge", "calico", "calico-ipam", "cilium-cni", "flannel", "host-local", "istio-cni", "portmap", "ptp", "tuning"}

func (e env) config() Config {
	return Config{
		ConfDir:           e.confDir,
		BinDir:            e.binDir,
		PluginBinary:      e.plugin,
		AgentSocket:       testSocket,
		AgentTimeout:      5 * time.Second,
		ExcludeNamespaces: []string{"kube-system", "istio-system", "kube-system"},
	}
}

func (e env) conf(name string) string { return filepath.Join(e.confDir, name) }

func newInstaller(t testing.TB, cfg Config) *Installer {
	t.Helper()
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// testCtx logs through the test.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	return ctx
}

// quietCtx does not log (benchmarks).
func quietCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(10)))
	t.Cleanup(cancel)
	return ctx
}

func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// aged sets path's mtime well in the past: a file at rest, not one being
// written (see settleTime).
func aged(t testing.TB, path string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// renameOver replaces path as CNI installers do: a temporary file, then
// a rename.
func renameOver(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".other-cni.tmp")
	writeFile(t, tmp, data, 0o644)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// pollUntil checks cond until it holds or the deadline passes; the
// deadline is an upper bound, not a wait. It returns the time taken.
func pollUntil(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// chainedLast: data is a conflist whose only meshlet-cni entry is last
// and has the socket.
func chainedLast(data []byte, socket string) bool {
	var list struct {
		Plugins []struct {
			Type        string `json:"type"`
			AgentSocket string `json:"agentSocket"`
		} `json:"plugins"`
	}
	if json.Unmarshal(data, &list) != nil || len(list.Plugins) == 0 {
		return false
	}
	n := 0
	for _, p := range list.Plugins {
		if p.Type == PluginType {
			n++
		}
	}
	last := list.Plugins[len(list.Plugins)-1]
	return n == 1 && last.Type == PluginType && last.AgentSocket == socket
}

func fileChainedLast(path, socket string) bool {
	b, err := os.ReadFile(path)
	return err == nil && chainedLast(b, socket)
}

// snapshot is a directory's files by name: content, mode, mtime, inode.
type snapshot map[string]snap

type snap struct {
	data []byte
	info os.FileInfo
}

func takeSnapshot(t testing.TB, dir string) snapshot {
	t.Helper()
	s := snapshot{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		s[e.Name()] = snap{readFile(t, p), fi}
	}
	return s
}

// sameFiles fails unless b has exactly a's files, untouched: same bytes,
// mode, mtime and inode (so not even rewritten with the same content).
func sameFiles(t testing.TB, a, b snapshot) {
	t.Helper()
	if len(a) != len(b) {
		t.Errorf("files %v, then %v", names(a), names(b))
	}
	for name, x := range a {
		y, ok := b[name]
		switch {
		case !ok:
			t.Errorf("%s removed", name)
		case !bytes.Equal(x.data, y.data):
			t.Errorf("%s changed:\n%s\nto\n%s", name, x.data, y.data)
		case !os.SameFile(x.info, y.info) || !x.info.ModTime().Equal(y.info.ModTime()) || x.info.Mode() != y.info.Mode():
			t.Errorf("%s rewritten (inode, mtime or mode changed)", name)
		}
	}
}

func names(s snapshot) []string {
	var n []string
	for k := range s {
		n = append(n, k)
	}
	return n
}

// startRun runs in.Run until the test ends, and waits for it to return.
func startRun(t testing.TB, ctx context.Context, in *Installer) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
