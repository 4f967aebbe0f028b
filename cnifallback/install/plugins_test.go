package install

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInstallRefusesWrongBinDir: a BinDir without the primary's plugins
// (its types and its IPAM's; one there but not executable counts as
// missing) is not the runtime's plugin directory: Install writes nothing,
// neither the binary nor the chain, and says which plugins are missing and
// what to set. Once they are there it installs.
func TestInstallRefusesWrongBinDir(t *testing.T) {
	for _, c := range []struct {
		name, data string
		missing    []string
	}{
		{"10-bridge.conflist", `{"cniVersion":"1.0.0","name":"k8s","plugins":[` +
			`{"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}},` +
			`{"type":"portmap","capabilities":{"portMappings":true}}]}`, []string{"host-local", "portmap"}},
		{"10-ptp.conf", `{"cniVersion":"0.4.0","name":"k8s","type":"ptp","ipam":{"type":"static"}}`, []string{"ptp", "static"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for _, p := range c.missing {
				if err := os.Remove(filepath.Join(e.binDir, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
			// There, but not a program the runtime could run.
			writeFile(t, filepath.Join(e.binDir, c.missing[0]), []byte("not a program"), 0o644)
			writeFile(t, e.conf(c.name), []byte(c.data), 0o644)
			confBefore, binBefore := takeSnapshot(t, e.confDir), takeSnapshot(t, e.binDir)
			in := newInstaller(t, e.config())
			_, err := in.Install(testCtx(t))
			var pm *PluginsMissingError
			if !errors.As(err, &pm) || !slices.Equal(pm.Missing, c.missing) || pm.Primary != e.conf(c.name) || pm.BinDir != e.binDir {
				t.Fatalf("Install: %v, want the plugins %v missing from %s", err, c.missing, e.binDir)
			}
			for _, want := range append([]string{"--cni-bin-dir=" + e.binDir, "paths.cniBinDir", e.conf(c.name)}, c.missing...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			if in.Installed() {
				t.Error("Installed after a refusal")
			}
			sameFiles(t, confBefore, takeSnapshot(t, e.confDir))
			sameFiles(t, binBefore, takeSnapshot(t, e.binDir))

			for _, p := range c.missing {
				writeFile(t, filepath.Join(e.binDir, p), []byte("#!/bin/sh\nexit 0\n"), 0o755)
			}
			if _, err := in.Install(testCtx(t)); err != nil || !in.Installed() {
				t.Fatalf("Install with the plugins in place: %v", err)
			}
		})
	}
}
