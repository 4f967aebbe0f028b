package install

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestUninstallTouchesNothingElse: only meshlet's entry, our files and
// our binary go; every other file (in both directories) keeps its bytes,
// inode and mtime. A second Uninstall changes nothing.
func TestUninstallTouchesNothingElse(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	writeFile(t, e.conf("00-broken.conflist"), []byte(`{"name":`), 0o644)
	aged(t, e.conf("00-broken.conflist"))
	writeFile(t, e.conf("20-other.conflist"), []byte(otherList), 0o644)
	writeFile(t, e.conf("30-meshlet-alone.conf"), []byte(`{"name":"m","type":"meshlet-cni"}`), 0o644)
	writeFile(t, e.conf("calico-kubeconfig"), []byte("apiVersion: v1\n"), 0o600)
	writeFile(t, filepath.Join(e.binDir, "calico"), []byte("binary"), 0o755)
	in := newInstaller(t, e.config())
	ctx := testCtx(t)
	if _, err := in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	confBefore, binBefore := takeSnapshot(t, e.confDir), takeSnapshot(t, e.binDir)
	if err := in.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	if in.Installed() {
		t.Error("Installed after Uninstall")
	}
	if got := readFile(t, e.conf("10-calico.conflist")); bytes.Contains(got, []byte(PluginType)) || !jsonEqual(got, []byte(calicoList)) {
		t.Errorf("primary after Uninstall:\n%s", got)
	}
	confAfter, binAfter := takeSnapshot(t, e.confDir), takeSnapshot(t, e.binDir)
	delete(confBefore, "10-calico.conflist")
	delete(confAfter, "10-calico.conflist")
	sameFiles(t, confBefore, confAfter)
	delete(binBefore, PluginType)
	sameFiles(t, binBefore, binAfter)

	confBefore, binBefore = takeSnapshot(t, e.confDir), takeSnapshot(t, e.binDir)
	if err := in.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, confBefore, takeSnapshot(t, e.confDir))
	sameFiles(t, binBefore, takeSnapshot(t, e.binDir))
}

// TestUninstallOtherFormatting: the primary CNI's own layout (tabs, one
// line) cannot come back byte for byte, since Install re-indents the
// file; what comes back is the same JSON, keys in the same order.
func TestUninstallOtherFormatting(t *testing.T) {
	for name, data := range map[string]string{
		"10-tabs.conflist":    "{\n\t\"cniVersion\": \"1.0.0\",\n\t\"name\": \"n\",\n\t\"plugins\": [{\"type\": \"bridge\", \"z\": 1, \"a\": 2}]\n}\n",
		"10-oneline.conf":     `{"name":"n","cniVersion":"0.4.0","type":"ptp","mtu":1500}`,
		"10-crlf.conflist":    "{\r\n  \"name\": \"n\",\r\n  \"plugins\": [\r\n    {\"type\": \"ptp\"}\r\n  ]\r\n}\r\n",
		"10-nofinal.conf":     "{\n  \"cniVersion\": \"0.4.0\",\n  \"name\": \"n\",\n  \"type\": \"ptp\"\n}",
		"10-unicode.conflist": `{"name":"n\u00e9","plugins":[{"type":"ptp","x":"\u003c"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			writeFile(t, e.conf(name), []byte(data), 0o644)
			in := newInstaller(t, e.config())
			ctx := testCtx(t)
			if _, err := in.Install(ctx); err != nil {
				t.Fatal(err)
			}
			if err := in.Uninstall(ctx); err != nil {
				t.Fatal(err)
			}
			got := readFile(t, e.conf(name))
			if !jsonEqual(got, []byte(data)) || keyOrder(t, got) != keyOrder(t, []byte(data)) {
				t.Errorf("restored\n%s\nwant the same JSON as\n%s", got, data)
			}
			if len(takeSnapshot(t, e.confDir)) != 1 {
				t.Errorf("files left: %v", names(takeSnapshot(t, e.confDir)))
			}
		})
	}
}

// keyOrder lists the top-level keys in order.
func keyOrder(t *testing.T, data []byte) string {
	o, err := parseObject(data)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	for _, m := range o {
		s += m.key + ","
	}
	return s
}

func TestUninstallOwnConflist(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	cfg := e.config()
	cfg.OwnConflist = true
	in := newInstaller(t, cfg)
	ctx := testCtx(t)
	if _, err := in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(t, e.confDir)
	if err := in.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	after := takeSnapshot(t, e.confDir)
	if _, ok := after[OwnConflistName]; ok {
		t.Error("own conflist left")
	}
	delete(before, OwnConflistName)
	sameFiles(t, before, after)
	if extra := e.binExtras(t); len(extra) != 0 {
		t.Errorf("bin dir: %v", extra)
	}
}

// TestUninstallConvertedConfWrittenAgain: the primary CNI wrote its .conf
// again after the conversion: that newer file stays, our conflist goes.
func TestUninstallConvertedConfWrittenAgain(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-bridge.conf"), []byte(bridgeConf), 0o644)
	in := newInstaller(t, e.config())
	ctx := testCtx(t)
	if _, err := in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	newer := []byte(`{"cniVersion":"0.4.0","name":"bridge-net","type":"bridge","bridge":"cni1"}`)
	writeFile(t, e.conf("10-bridge.conf"), newer, 0o644)
	if err := in.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, e.conf("10-bridge.conf")); !bytes.Equal(got, newer) {
		t.Errorf(".conf overwritten: %s", got)
	}
	if _, err := os.Stat(e.conf("10-bridge.conflist")); !os.IsNotExist(err) {
		t.Errorf("converted conflist left: %v", err)
	}
}

// TestUninstallKeepsBinaryItDidNotCopy: without PluginBinary the binary
// is someone else's.
func TestUninstallKeepsBinaryItDidNotCopy(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.conf("10-calico.conflist"), []byte(calicoList), 0o644)
	writeFile(t, filepath.Join(e.binDir, PluginType), []byte("installed by a package"), 0o755)
	cfg := e.config()
	cfg.PluginBinary = ""
	in := newInstaller(t, cfg)
	ctx := testCtx(t)
	if _, err := in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(t, e.binDir)
	if err := in.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, before, takeSnapshot(t, e.binDir))
}

func TestUninstallWithoutConfDir(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.ConfDir = filepath.Join(e.confDir, "missing")
	if err := newInstaller(t, cfg).Uninstall(testCtx(t)); err != nil {
		t.Errorf("Uninstall: %v", err)
	}
}
