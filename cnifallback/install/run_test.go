package install

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunReasserts: the primary CNI rewrites its conflist without
// meshlet, by rename (as installers do) and in place (truncate, write);
// each time meshlet is back within a second, and OnReassert sees it.
func TestRunReasserts(t *testing.T) {
	e := newEnv(t)
	path := e.conf("10-calico.conflist")
	writeFile(t, path, []byte(calicoList), 0o644)
	cfg := e.config()
	var mu sync.Mutex
	var reasserts []string
	cfg.OnReassert = func(trigger string, latency time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if latency <= 0 || latency > reassertBound {
			t.Errorf("OnReassert(%s, %v)", trigger, latency)
		}
		reasserts = append(reasserts, trigger)
	}
	in := newInstaller(t, cfg)
	startRun(t, testCtx(t), in)
	pollUntil(t, waitBound, "first install", func() bool { return in.Installed() && fileChainedLast(path, testSocket) })

	for i := range 6 {
		if i%2 == 0 {
			renameOver(t, path, []byte(calicoList))
		} else {
			writeFile(t, path, []byte(calicoList), 0o644)
		}
		took := pollUntil(t, waitBound, "re-assert", func() bool { return fileChainedLast(path, testSocket) })
		t.Logf("rewrite %d: meshlet back after %v", i, took)
	}
	pollUntil(t, waitBound, "OnReassert calls", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reasserts) == 7
	})
	mu.Lock()
	defer mu.Unlock()
	// A rewrite that lands while a pass for our own write's event is
	// pending is answered by that pass, under its trigger.
	if reasserts[0] != "start" {
		t.Errorf("triggers %v", reasserts)
	}
	for _, r := range reasserts[1:] {
		if r != "conf-dir" && r != "bin-dir" {
			t.Errorf("triggers %v", reasserts)
		}
	}
	if s := in.Stats(); s.Backoffs != 0 {
		t.Errorf("backed off: %+v", s)
	}
}

// TestRunLowerSortingFileAppears: a new primary (sorting first) gets
// meshlet within a second.
func TestRunLowerSortingFileAppears(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	in := newInstaller(t, e.config())
	startRun(t, testCtx(t), in)
	pollUntil(t, waitBound, "install", in.Installed)
	renameOver(t, e.conf("05-cilium.conflist"), []byte(`{"cniVersion":"0.3.1","name":"cilium","plugins":[{"type":"cilium-cni"}]}`))
	pollUntil(t, waitBound, "chained into the new primary", func() bool { return fileChainedLast(e.conf("05-cilium.conflist"), testSocket) })
}

// TestRunWaitsForConfDir: no config directory, then an empty one, then a
// primary: not fatal, not installed, then installed.
func TestRunWaitsForConfDir(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.ConfDir = filepath.Join(e.confDir, "later")
	in := newInstaller(t, cfg)
	startRun(t, testCtx(t), in)
	pollUntil(t, waitBound, "first pass", func() bool { return in.Stats().Passes > 0 })
	if in.Installed() {
		t.Fatal("installed without a config directory")
	}
	if err := os.Mkdir(cfg.ConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Run re-tries the watch every second.
	pollUntil(t, watchRetry+waitBound, "pass on the new directory", func() bool { return in.Stats().Passes > 1 })
	passes := in.Stats().Passes
	path := filepath.Join(cfg.ConfDir, "10-calico.conflist")
	renameOver(t, path, []byte(calicoList))
	pollUntil(t, waitBound, "installed once the primary appears", func() bool { return in.Installed() && fileChainedLast(path, testSocket) })
	if in.Stats().Passes-passes > 5 {
		t.Errorf("%d passes for one new file", in.Stats().Passes-passes)
	}
}

// TestRunRestoresBinary: the binary removed or replaced comes back.
func TestRunRestoresBinary(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	in := newInstaller(t, e.config())
	startRun(t, testCtx(t), in)
	bin := filepath.Join(e.binDir, PluginType)
	want := string(readFile(t, e.plugin))
	isRight := func() bool {
		b, err := os.ReadFile(bin)
		return err == nil && string(b) == want
	}
	pollUntil(t, waitBound, "install", func() bool { return in.Installed() && isRight() })
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, waitBound, "binary back after removal", isRight)
	renameOver(t, bin, []byte("something else"))
	pollUntil(t, waitBound, "binary back after replacement", isRight)
}

// TestRunUpgrade: an old meshlet installed with another socket; the
// primary CNI's installer then rewrites its conflist (as on its own
// upgrade); the new meshlet's Run leaves one entry, last, new socket.
func TestRunUpgrade(t *testing.T) {
	e := newEnv(t)
	path := e.conf("10-calico.conflist")
	writeFile(t, path, []byte(calicoList), 0o644)
	old := e.config()
	old.AgentSocket = "/run/meshlet-old/cni.sock"
	ctx := testCtx(t)
	if _, err := newInstaller(t, old).Install(ctx); err != nil {
		t.Fatal(err)
	}
	if !fileChainedLast(path, old.AgentSocket) {
		t.Fatal("old install")
	}
	in := newInstaller(t, e.config())
	startRun(t, ctx, in)
	pollUntil(t, waitBound, "new socket", func() bool { return fileChainedLast(path, testSocket) })
	renameOver(t, path, []byte(calicoList))
	pollUntil(t, waitBound, "re-assert after the primary CNI's rewrite", func() bool { return fileChainedLast(path, testSocket) })
}

// TestRunOwnConflistFollowsPrimary: with OwnConflist, a change to the
// primary reaches meshlet's copy within a second.
func TestRunOwnConflistFollowsPrimary(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	cfg := e.config()
	cfg.OwnConflist = true
	in := newInstaller(t, cfg)
	startRun(t, testCtx(t), in)
	own := e.conf(OwnConflistName)
	pollUntil(t, waitBound, "install", func() bool { return in.Installed() && fileChainedLast(own, testSocket) })
	renameOver(t, e.conf("10-calico.conflist"), []byte(otherList))
	pollUntil(t, waitBound, "copy follows", func() bool {
		b, err := os.ReadFile(own)
		return err == nil && chainedLast(b, testSocket) && jsonEqual(mustName(b), []byte(`"other"`))
	})
	if err := os.Remove(own); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, waitBound, "own conflist back", func() bool { return fileChainedLast(own, testSocket) })
}

func mustName(b []byte) []byte {
	o, err := parseObject(b)
	if err != nil {
		return nil
	}
	v, _ := o.get("name")
	return v
}

// TestRunLoopGuard: a writer that keeps removing meshlet (a misbehaving
// operator, another meshlet) does not make Run spin: its writes stay few,
// it backs off, and once the fight stops meshlet is back.
func TestRunLoopGuard(t *testing.T) {
	e := newEnv(t)
	path := e.conf("10-calico.conflist")
	writeFile(t, path, []byte(calicoList), 0o644)
	in := newInstaller(t, e.config())
	var writes atomic.Int64
	in.cfg.OnReassert = func(string, time.Duration) { writes.Add(1) }
	ctx := testCtx(t)
	startRun(t, ctx, in)
	pollUntil(t, waitBound, "install", in.Installed)
	writes.Store(0)
	passes := in.Stats().Passes

	const fight = 3 * time.Second
	fightCtx, stop := context.WithTimeout(ctx, fight)
	defer stop()
	fighter := 0
	for fightCtx.Err() == nil {
		if fileChainedLast(path, testSocket) {
			renameOver(t, path, []byte(calicoList))
			fighter++
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Unguarded, Run would write once per fighter write (fighter is in the
	// hundreds); the guard allows 10 in 10 s, then 250 ms, 500 ms, 1 s, 2 s
	// apart: at most 10+4 within 3 s, plus one that was in flight.
	got := writes.Load()
	s := in.Stats()
	t.Logf("fighter wrote %d times; Run wrote %d times in %d passes, %d back-offs", fighter, got, s.Passes-passes, s.Backoffs)
	if got > 16 || got < 11 {
		t.Errorf("Run wrote %d times during a %v fight, want 11..16", got, fight)
	}
	if s.Backoffs == 0 || s.Backoffs > 6 {
		t.Errorf("%d back-offs", s.Backoffs)
	}
	if n := s.Passes - passes; n > 4*uint64(got)+20 {
		t.Errorf("%d passes for %d writes: spinning", n, got)
	}
	// The fight is over: meshlet is back within the longest back-off.
	pollUntil(t, defaultGuard.maxDelay+reassertBound, "back after the fight", func() bool { return fileChainedLast(path, testSocket) })
}

// TestRunStopsOnCancel: Run returns nil promptly when its context ends.
func TestRunStopsOnCancel(t *testing.T) {
	e := newEnv(t)
	in := newInstaller(t, e.config())
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	pollUntil(t, waitBound, "first pass", func() bool { return in.Stats().Passes > 0 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(reassertBound):
		t.Fatal("Run did not return")
	}
}

// TestRunHeldByUninstall: after Uninstall a running Run does not put
// meshlet back; Install lets it again.
func TestRunHeldByUninstall(t *testing.T) {
	e := newEnv(t)
	path := e.conf("10-calico.conflist")
	writeFile(t, path, []byte(calicoList), 0o644)
	in := newInstaller(t, e.config())
	held := make(chan time.Time, 100)
	in.afterPass = func(err error) {
		if errors.Is(err, errDisabled) {
			held <- time.Now()
		}
	}
	ctx := testCtx(t)
	startRun(t, ctx, in)
	pollUntil(t, waitBound, "install", in.Installed)
	if err := in.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	writes := in.Stats().Writes
	renamed := time.Now()
	renameOver(t, path, []byte(calicoList))
	// A pass held after the rename is one that would have re-asserted.
	for answered := false; !answered; {
		select {
		case at := <-held:
			answered = at.After(renamed)
		case <-time.After(reassertBound):
			t.Fatal("Run did not answer the rename")
		}
	}
	if got := readFile(t, path); string(got) != calicoList || in.Stats().Writes != writes || in.Installed() {
		t.Fatalf("Run re-asserted after Uninstall:\n%s", got)
	}
	if _, err := in.Install(ctx); err != nil || !fileChainedLast(path, testSocket) {
		t.Fatalf("Install: %v", err)
	}
	renameOver(t, path, []byte(calicoList))
	pollUntil(t, waitBound, "Run re-asserts again", func() bool { return fileChainedLast(path, testSocket) })
}

// TestRunSetExcludeNamespaces: the node's excluded namespaces change while
// Run runs: the entry is rewritten with the new list at once (sorted,
// deduplicated, under the trigger "settings"), and the same list again
// writes nothing.
func TestRunSetExcludeNamespaces(t *testing.T) {
	e := newEnv(t)
	path := e.conf("10-calico.conflist")
	writeFile(t, path, []byte(calicoList), 0o644)
	cfg := e.config()
	triggers := make(chan string, 16)
	cfg.OnReassert = func(trigger string, _ time.Duration) { triggers <- trigger }
	in := newInstaller(t, cfg)
	startRun(t, testCtx(t), in)
	excluded := func() []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Plugins []struct {
				Type              string   `json:"type"`
				ExcludeNamespaces []string `json:"excludeNamespaces"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Plugins {
			if p.Type == PluginType {
				return p.ExcludeNamespaces
			}
		}
		return nil
	}
	pollUntil(t, waitBound, "first install", func() bool { return in.Installed() && fileChainedLast(path, testSocket) })
	if got := <-triggers; got != "start" {
		t.Fatalf("first pass's trigger %q", got)
	}
	if got := excluded(); !slices.Equal(got, []string{"istio-system", "kube-system"}) {
		t.Fatalf("excludeNamespaces %v at start", got)
	}
	// Quiet first (the pass the first write's own event asks for is done):
	// only SetExcludeNamespaces can ask for the next pass.
	var passes uint64
	pollUntil(t, waitBound, "Run quiet", func() bool {
		p := in.Stats().Passes
		if p != passes {
			passes = p
			time.Sleep(10 * debounce)
			return false
		}
		return true
	})

	if !in.SetExcludeNamespaces([]string{"kube-system", "batch", "istio-system", "batch"}) {
		t.Fatal("SetExcludeNamespaces with a new list: no change")
	}
	pollUntil(t, waitBound, "the new excludeNamespaces", func() bool {
		return slices.Equal(excluded(), []string{"batch", "istio-system", "kube-system"})
	})
	if got := <-triggers; got != "settings" {
		t.Fatalf("rewrite's trigger %q, want settings", got)
	}
	if in.SetExcludeNamespaces([]string{"istio-system", "batch", "kube-system"}) {
		t.Fatal("the same list again: the entry changed")
	}
}
