package install

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

const (
	calicoList = `{"name":"k8s-pod-network","cniVersion":"0.3.1","plugins":[{"type":"calico","mtu":1440},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	otherList  = `{"name":"other","cniVersion":"1.0.0","plugins":[{"type":"ptp"}]}`
	bridgeConf = `{"cniVersion":"0.4.0","name":"bridge-net","type":"bridge","bridge":"cni0"}`
)

func TestValidate(t *testing.T) {
	good := newEnv(t).config()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag string
		edit func(*Config)
	}{
		{"--cni-conf-dir", func(c *Config) { c.ConfDir = "" }},
		{"--cni-conf-dir", func(c *Config) { c.ConfDir = "etc/cni/net.d" }},
		{"--cni-bin-dir", func(c *Config) { c.BinDir = "bin" }},
		{"--cni-socket", func(c *Config) { c.AgentSocket = "" }},
		{"--cni-socket", func(c *Config) { c.AgentSocket = "cni.sock" }},
		{"--cni-plugin-binary", func(c *Config) { c.PluginBinary = "./meshlet-cni" }},
		{"agent timeout", func(c *Config) { c.AgentTimeout = -time.Second }},
		{"resync interval", func(c *Config) { c.ResyncInterval = -time.Second }},
		{"--excluded-namespaces", func(c *Config) { c.ExcludeNamespaces = []string{"kube-system", ""} }},
		{"--excluded-namespaces", func(c *Config) { c.ExcludeNamespaces = []string{"Kube_System"} }},
	} {
		c := good
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Validate: %v, want an error naming %s", err, tc.flag)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New accepted what Validate refuses (%s)", tc.flag)
		}
	}
}

// TestInstallIdempotent: a second pass finds everything right and writes
// nothing: same inode, same mtime, for the conflist and the binary.
func TestInstallIdempotent(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	in := newInstaller(t, e.config())
	ctx := testCtx(t)
	out, err := in.Install(ctx)
	if err != nil || !out.Wrote || !out.BinaryWrote {
		t.Fatalf("first Install: %+v %v", out, err)
	}
	conf, bin := takeSnapshot(t, e.confDir), takeSnapshot(t, e.binDir)
	for range 3 {
		out, err = in.Install(ctx)
		if err != nil || out.Wrote || out.BinaryWrote || len(out.Removed) > 0 {
			t.Fatalf("next Install: %+v %v", out, err)
		}
	}
	// A fresh Installer (a restarted daemon) has no cache: still nothing.
	if out, err := newInstaller(t, e.config()).Install(ctx); err != nil || out.Wrote || out.BinaryWrote {
		t.Fatalf("restarted Install: %+v %v", out, err)
	}
	sameFiles(t, conf, takeSnapshot(t, e.confDir))
	sameFiles(t, bin, takeSnapshot(t, e.binDir))
	if s := in.Stats(); s.Passes != 4 || s.Writes != 1 {
		t.Errorf("stats %+v, want 4 passes, 1 write", s)
	}
	if !in.Installed() || out.Conflist != e.conf("10-calico.conflist") || out.Primary != out.Conflist {
		t.Errorf("installed %v, outcome %+v", in.Installed(), out)
	}
}

// TestInstallKeepsMode: the rewritten file keeps its mode; a converted
// .conf's mode passes to its .conflist.
func TestInstallKeepsMode(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o600)
	ctx := testCtx(t)
	if _, err := newInstaller(t, e.config()).Install(ctx); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(e.conf("10-calico.conflist")); fi.Mode().Perm() != 0o600 {
		t.Errorf("conflist mode %v, want 0600", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(filepath.Join(e.binDir, PluginType)); fi.Mode().Perm() != 0o755 {
		t.Errorf("binary mode %v, want 0755", fi.Mode().Perm())
	}

	e = newEnv(t)
	writeFile(t, e.conf("10-bridge.conf"), []byte(bridgeConf), 0o640)
	out, err := newInstaller(t, e.config()).Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(out.Conflist); fi.Mode().Perm() != 0o640 {
		t.Errorf("converted conflist mode %v, want 0640", fi.Mode().Perm())
	}
}

// TestInstallSelectsLikeTheRuntime: lexical order, files that do not
// load are skipped (and left alone), other extensions are ignored.
func TestInstallSelectsLikeTheRuntime(t *testing.T) {
	e := newEnv(t)
	files := map[string]string{
		"00-broken.conflist":  `{"name":"x","plugins":[`,
		"01-plugins.conflist": `{"name":"x","plugins":{"type":"bridge"}}`,
		"02-notype.conf":      `{"name":"x","cniVersion":"1.0.0"}`,
		"03-list-in.conf":     calicoList, // a conflist in a .conf: no type, skipped
		"04-empty.json":       ``,
		"00-ignored.yaml":     calicoList,
		"10-calico.conflist":  calicoList,
		"20-other.conflist":   otherList,
	}
	for name, data := range files {
		writeFile(t, e.conf(name), []byte(data), 0o644)
		aged(t, e.conf(name))
	}
	before := takeSnapshot(t, e.confDir)
	out, err := newInstaller(t, e.config()).Install(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if out.Conflist != e.conf("10-calico.conflist") || !fileChainedLast(out.Conflist, testSocket) {
		t.Fatalf("chained into %s", out.Conflist)
	}
	after := takeSnapshot(t, e.confDir)
	delete(before, "10-calico.conflist")
	delete(after, "10-calico.conflist")
	sameFiles(t, before, after)
}

// TestInstallWaitsForMidWriteFile: a lower-sorting file that does not
// parse but just changed is being written: the pass does not chain into
// the next file meanwhile. Once it is old and still broken, it is skipped.
func TestInstallWaitsForMidWriteFile(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("20-other.conflist"), []byte(otherList), 0o644)
	writeFile(t, e.conf("10-calico.conflist"), nil, 0o644) // truncated, not yet written
	in := newInstaller(t, e.config())
	_, err := in.Install(testCtx(t))
	if !errors.Is(err, errSettling) || !strings.Contains(err.Error(), "10-calico.conflist") || in.Installed() {
		t.Fatalf("Install: %v, want errSettling naming 10-calico.conflist", err)
	}
	if fileChainedLast(e.conf("20-other.conflist"), testSocket) {
		t.Fatal("chained into the next file while the first was being written")
	}
	aged(t, e.conf("10-calico.conflist"))
	if out, err := in.Install(testCtx(t)); err != nil || out.Conflist != e.conf("20-other.conflist") {
		t.Fatalf("Install: %+v %v", out, err)
	}
}

func TestInstallWithoutPrimary(t *testing.T) {
	e := newEnv(t)
	missing := e.config()
	missing.ConfDir = filepath.Join(e.confDir, "not-yet")
	in := newInstaller(t, missing)
	ctx := testCtx(t)
	if _, err := in.Install(ctx); !errors.Is(err, errNoConfDir) || in.Installed() {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := os.Stat(missing.ConfDir); !os.IsNotExist(err) {
		t.Errorf("Install created the config directory: %v", err)
	}
	in = newInstaller(t, e.config())
	if _, err := in.Install(ctx); !errors.Is(err, errNoPrimary) || in.Installed() {
		t.Errorf("empty dir: %v", err)
	}
	writeFile(t, e.conf("10-bad.conflist"), []byte(`{"name":"n","plugins":7}`), 0o644)
	aged(t, e.conf("10-bad.conflist"))
	if _, err := in.Install(ctx); !errors.Is(err, errNoPrimary) || !strings.Contains(err.Error(), `10-bad.conflist: "plugins" is a number, want an array`) {
		t.Errorf("only a bad file: %v", err)
	}
	writeFile(t, e.conf("20-calico.conflist"), []byte(calicoList), 0o644)
	if _, err := in.Install(ctx); err != nil || !in.Installed() {
		t.Errorf("primary appeared: %v", err)
	}
}

func TestInstallOwnConflist(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o600)
	cfg := e.config()
	cfg.OwnConflist = true
	in := newInstaller(t, cfg)
	ctx := testCtx(t)
	out, err := in.Install(ctx)
	if err != nil || !out.Wrote || out.Conflist != e.conf(OwnConflistName) || out.Primary != e.conf("10-calico.conflist") {
		t.Fatalf("Install: %+v %v", out, err)
	}
	if got := readFile(t, e.conf("10-calico.conflist")); string(got) != calicoList {
		t.Errorf("primary edited: %s", got)
	}
	if fi, _ := os.Stat(out.Conflist); fi.Mode().Perm() != 0o600 {
		t.Errorf("own conflist mode %v: want the primary's 0600", fi.Mode().Perm())
	}
	if !fileChainedLast(out.Conflist, testSocket) {
		t.Errorf("own conflist:\n%s", readFile(t, out.Conflist))
	}
	if out, err := in.Install(ctx); err != nil || out.Wrote {
		t.Errorf("second Install: %+v %v", out, err)
	}

	// The primary CNI changes its config: the copy follows.
	writeFile(t, e.conf("10-calico.conflist"), []byte(strings.Replace(calicoList, "1440", "1400", 1)), 0o600)
	if out, err := in.Install(ctx); err != nil || !out.Wrote || !bytes.Contains(readFile(t, out.Conflist), []byte(`"mtu": 1400`)) {
		t.Errorf("after the primary changed: %+v %v", out, err)
	}

	// A config sorting before ours: the runtime would not use ours.
	writeFile(t, e.conf("04-other.conflist"), []byte(otherList), 0o644)
	_, err = in.Install(ctx)
	if err == nil || !strings.Contains(err.Error(), e.conf("04-other.conflist")) || in.Installed() {
		t.Errorf("shadowed: %v, installed %v", err, in.Installed())
	}
	if err := os.Remove(e.conf("04-other.conflist")); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Install(ctx); err != nil || !in.Installed() {
		t.Errorf("no longer shadowed: %v", err)
	}
}

// TestInstallOwnConflistFromConf: a .conf primary is copied as a
// conflist (no convertedFrom: nothing to restore) and left in place.
func TestInstallOwnConflistFromConf(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-bridge.conf"), []byte(bridgeConf), 0o644)
	cfg := e.config()
	cfg.OwnConflist = true
	out, err := newInstaller(t, cfg).Install(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	got := readFile(t, out.Conflist)
	if !chainedLast(got, testSocket) || bytes.Contains(got, []byte("convertedFrom")) {
		t.Errorf("own conflist:\n%s", got)
	}
	if string(readFile(t, e.conf("10-bridge.conf"))) != bridgeConf {
		t.Error("the .conf was touched")
	}
}

// TestInstallSwitchesFromOwnConflist: without OwnConflist, an own
// conflist left by an earlier run (which would shadow the primary) goes.
func TestInstallSwitchesFromOwnConflist(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	cfg := e.config()
	cfg.OwnConflist = true
	ctx := testCtx(t)
	if _, err := newInstaller(t, cfg).Install(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.OwnConflist = false
	out, err := newInstaller(t, cfg).Install(ctx)
	if err != nil || len(out.Removed) != 1 || out.Removed[0] != e.conf(OwnConflistName) || out.Conflist != e.conf("10-calico.conflist") {
		t.Fatalf("Install: %+v %v", out, err)
	}
	if _, err := os.Stat(e.conf(OwnConflistName)); !os.IsNotExist(err) {
		t.Errorf("own conflist still there: %v", err)
	}
}

// failingWrite makes the write's reader fail after a few bytes: a full
// disk in the middle of the temporary file.
func failingWrite(dir, name string, r io.Reader, perm os.FileMode, opts atomicfile.Options) error {
	return atomicfile.WriteWith(dir, name, io.MultiReader(io.LimitReader(r, 10), errReader{}), perm, opts)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) {
	return 0, errors.New("no space left on device (injected)")
}

// TestInstallFailedWriteKeepsOriginal: a write that fails half-way leaves
// the original file, no temporary file, and Installed false; the next
// pass succeeds.
func TestInstallFailedWriteKeepsOriginal(t *testing.T) {
	for _, name := range []string{"10-calico.conflist", "10-bridge.conf"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			data := calicoList
			if name == "10-bridge.conf" {
				data = bridgeConf
			}
			writeFile(t, e.conf(name), []byte(data), 0o644)
			in := newInstaller(t, e.config())
			ctx := testCtx(t)
			if _, err := in.Install(ctx); err != nil { // the binary
				t.Fatal(err)
			}
			if err := in.Uninstall(ctx); err != nil {
				t.Fatal(err)
			}
			writeFile(t, e.conf(name), []byte(data), 0o644)
			before := takeSnapshot(t, e.confDir)
			in.write = failingWrite
			if _, err := in.Install(ctx); err == nil || !strings.Contains(err.Error(), "injected") || in.Installed() {
				t.Fatalf("Install: %v, installed %v", err, in.Installed())
			}
			sameFiles(t, before, takeSnapshot(t, e.confDir))
			if extra := e.binExtras(t); len(extra) != 0 {
				t.Errorf("bin dir holds %v after a failed binary write", extra)
			}
			in.write = atomicfile.WriteWith
			if _, err := in.Install(ctx); err != nil || !in.Installed() {
				t.Fatalf("Install after the failure: %v", err)
			}
		})
	}
}

// TestInstallDoesNotUndoConcurrentWrite: when the primary CNI rewrites
// its file while we write ours, ours is dropped, not renamed over its.
func TestInstallDoesNotUndoConcurrentWrite(t *testing.T) {
	e := newEnv(t)
	path := e.conf("10-calico.conflist")
	writeFile(t, path, []byte(calicoList), 0o644)
	in := newInstaller(t, e.config())
	theirs := []byte(strings.Replace(calicoList, "1440", "1400", 1))
	in.write = func(dir, name string, r io.Reader, perm os.FileMode, opts atomicfile.Options) error {
		if name == "10-calico.conflist" {
			renameOver(t, path, theirs)
		}
		return atomicfile.WriteWith(dir, name, r, perm, opts)
	}
	if _, err := in.Install(testCtx(t)); !errors.Is(err, errSourceChanged) {
		t.Fatalf("Install: %v, want errSourceChanged", err)
	}
	if got := readFile(t, path); !bytes.Equal(got, theirs) {
		t.Errorf("their write undone: %s", got)
	}
	in.write = atomicfile.WriteWith
	if _, err := in.Install(testCtx(t)); err != nil || !bytes.Contains(readFile(t, path), []byte("1400")) {
		t.Errorf("retry: %v", err)
	}
}

func TestInstallBinary(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	in := newInstaller(t, e.config())
	ctx := testCtx(t)
	dst := filepath.Join(e.binDir, PluginType)
	check := func(what string, wantWrite bool) {
		t.Helper()
		out, err := in.Install(ctx)
		if err != nil || out.BinaryWrote != wantWrite {
			t.Fatalf("%s: %+v %v", what, out, err)
		}
		fi, err := os.Stat(dst)
		if err != nil || fi.Mode().Perm() != 0o755 || !bytes.Equal(readFile(t, dst), readFile(t, e.plugin)) {
			t.Fatalf("%s: installed binary %v %v", what, fi, err)
		}
	}
	check("first", true)
	check("same", false)
	writeFile(t, dst, []byte("#!/bin/sh\n# other version \nexit 1\n"), 0o755) // same size, other content
	check("replaced", true)
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
	check("not executable", true)
	if err := os.Remove(dst); err != nil {
		t.Fatal(err)
	}
	check("removed", true)
	writeFile(t, e.plugin, []byte("#!/bin/sh\n# a new meshlet-cni\nexit 0\n"), 0o755)
	check("new version", true)

	// Without PluginBinary something else installs it: Install only checks.
	cfg := e.config()
	cfg.PluginBinary = ""
	other := newInstaller(t, cfg)
	if out, err := other.Install(ctx); err != nil || out.BinaryWrote {
		t.Errorf("present, not ours: %+v %v", out, err)
	}
	if err := os.Remove(dst); err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(t, e.confDir)
	if _, err := other.Install(ctx); err == nil || !strings.Contains(err.Error(), dst) || other.Installed() {
		t.Errorf("missing, not ours: %v", err)
	}
	sameFiles(t, before, takeSnapshot(t, e.confDir))

	cfg.PluginBinary = filepath.Join(e.binDir, "missing")
	if _, err := newInstaller(t, cfg).Install(ctx); err == nil || !strings.Contains(err.Error(), "--cni-plugin-binary") {
		t.Errorf("missing source: %v", err)
	}
}

func TestInstallRefuses(t *testing.T) {
	ctx := testCtx(t)
	t.Run("symlink", func(t *testing.T) {
		e := newEnv(t)
		target := filepath.Join(t.TempDir(), "calico.conflist")
		writeFile(t, target, []byte(calicoList), 0o644)
		if err := os.Symlink(target, e.conf("10-calico.conflist")); err != nil {
			t.Fatal(err)
		}
		if _, err := newInstaller(t, e.config()).Install(ctx); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("Install: %v", err)
		}
		if string(readFile(t, target)) != calicoList {
			t.Error("symlink target edited")
		}
	})
	t.Run("foreign conflist in the way", func(t *testing.T) {
		e := newEnv(t)
		writeFile(t, e.conf("10-bridge.conf"), []byte(bridgeConf), 0o644)
		writeFile(t, e.conf("10-bridge.conflist"), []byte(otherList), 0o644)
		before := takeSnapshot(t, e.confDir)
		if _, err := newInstaller(t, e.config()).Install(ctx); err == nil || !strings.Contains(err.Error(), "meshlet did not write it") {
			t.Errorf("Install: %v", err)
		}
		sameFiles(t, before, takeSnapshot(t, e.confDir))
	})
	t.Run("plugins from the network's directory", func(t *testing.T) {
		e := newEnv(t)
		writeFile(t, e.conf("10-net.conflist"), []byte(`{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"bridge"}]}`), 0o644)
		if err := os.Mkdir(e.conf("net"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(e.conf("net"), "50-tuning.conf"), []byte(`{"type":"tuning"}`), 0o644)
		if _, err := newInstaller(t, e.config()).Install(ctx); err == nil || !strings.Contains(err.Error(), "would not run last") {
			t.Errorf("Install: %v", err)
		}
	})
}

// TestInstallConvertsConf: the .conflist is in place before the .conf
// goes; re-running finds it right; the primary CNI writing its .conf
// again is converted again.
func TestInstallConvertsConf(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-bridge.json"), []byte(bridgeConf), 0o644)
	in := newInstaller(t, e.config())
	ctx := testCtx(t)
	out, err := in.Install(ctx)
	if err != nil || out.Conflist != e.conf("10-bridge.conflist") || len(out.Removed) != 1 || out.Removed[0] != e.conf("10-bridge.json") {
		t.Fatalf("Install: %+v %v", out, err)
	}
	if out, err := in.Install(ctx); err != nil || out.Wrote || len(out.Removed) != 0 {
		t.Fatalf("second Install: %+v %v", out, err)
	}
	// The primary CNI writes its .json again. 10-bridge.conflist sorts
	// first, so the runtime would go on with our copy of the old one: the
	// new one is converted in its place.
	writeFile(t, e.conf("10-bridge.json"), []byte(strings.Replace(bridgeConf, "cni0", "cni1", 1)), 0o644)
	out, err = in.Install(ctx)
	if err != nil || !out.Wrote || out.Primary != e.conf("10-bridge.json") || len(out.Removed) != 1 {
		t.Fatalf("third Install: %+v %v", out, err)
	}
	if got := readFile(t, out.Conflist); !bytes.Contains(got, []byte(`"cni1"`)) || !chainedLast(got, testSocket) {
		t.Errorf("after the .json was rewritten:\n%s", got)
	}
	if _, err := os.Stat(e.conf("10-bridge.json")); !os.IsNotExist(err) {
		t.Errorf(".json still there: %v", err)
	}
}
