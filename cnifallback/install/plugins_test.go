package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInstallRefusesWrongBinDir: a BinDir that is not where the runtime
// looks plugins up is refused, Install writing nothing (neither the binary
// nor the chain) and saying what to set. Where the runtime says where it
// looks, BinDir must be one of those directories (the primary's plugins
// may be in another); where it does not, a BinDir with none of the
// primary's plugins (its types and its IPAM's; one there but not
// executable counts as absent) is refused, and one with some is not.
func TestInstallRefusesWrongBinDir(t *testing.T) {
	const bridge = `{"cniVersion":"1.0.0","name":"k8s","plugins":[` +
		`{"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}},` +
		`{"type":"portmap","capabilities":{"portMappings":true}}]}`
	for _, c := range []struct {
		name, file, data string
		absent           []string // removed from BinDir
		runtime          []string // the runtime's bin dirs ("BIN": BinDir); nil: it does not say
		refused          bool
		want             []string // in the error
	}{
		{"none of the plugins", "10-bridge.conflist", bridge, []string{"bridge", "host-local", "portmap"}, nil, true,
			[]string{"holds none of the plugins", "bridge, host-local, portmap", "paths.cniBinDir", "10-bridge.conflist"}},
		{"a .conf's plugin and IPAM", "10-ptp.conf", `{"cniVersion":"0.4.0","name":"k8s","type":"ptp","ipam":{"type":"static"}}`,
			[]string{"ptp", "static"}, nil, true, []string{"ptp, static"}},
		{"some of the plugins", "10-bridge.conflist", bridge, []string{"host-local", "portmap"}, nil, false, nil},
		{"not one of the runtime's", "10-bridge.conflist", bridge, nil, []string{"/opt/cni/bin", "/usr/lib/cni"}, true,
			[]string{"is not where the runtime looks plugins up", "/opt/cni/bin, /usr/lib/cni", "paths.cniBinDir"}},
		{"one of the runtime's, plugins in another", "10-bridge.conflist", bridge, []string{"bridge", "host-local", "portmap"},
			[]string{"/usr/lib/cni", "BIN"}, false, nil},
		{"one of the runtime's, spelt with a slash", "10-bridge.conflist", bridge, nil, []string{"BIN/"}, false, nil},
		{"one of the runtime's, through a symbolic link", "10-bridge.conflist", bridge, nil, []string{"LINK"}, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for _, p := range c.absent {
				if err := os.Remove(filepath.Join(e.binDir, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
			if len(c.absent) > 0 {
				// There, but not a program the runtime could run.
				writeFile(t, filepath.Join(e.binDir, c.absent[0]), []byte("not a program"), 0o644)
			}
			writeFile(t, e.conf(c.file), []byte(c.data), 0o644)
			cfg := e.config()
			if c.runtime != nil {
				dirs := slices.Clone(c.runtime)
				for i, d := range dirs {
					switch d {
					case "BIN":
						dirs[i] = e.binDir
					case "BIN/":
						dirs[i] = e.binDir + "/"
					case "LINK":
						dirs[i] = filepath.Join(t.TempDir(), "bin")
						if err := os.Symlink(e.binDir, dirs[i]); err != nil {
							t.Fatal(err)
						}
					}
				}
				cfg.RuntimeBinDirs = func(context.Context) ([]string, bool) { return dirs, true }
			}
			confBefore, binBefore := takeSnapshot(t, e.confDir), takeSnapshot(t, e.binDir)
			in := newInstaller(t, cfg)
			_, err := in.Install(testCtx(t))
			if !c.refused {
				if err != nil || !in.Installed() {
					t.Fatalf("Install: %v, want it installed", err)
				}
				return
			}
			var bd *BinDirError
			if !errors.As(err, &bd) || bd.BinDir != e.binDir || bd.Primary != e.conf(c.file) || in.Installed() {
				t.Fatalf("Install: %v (installed %v), want a BinDirError for %s", err, in.Installed(), e.binDir)
			}
			for _, want := range append([]string{"--cni-bin-dir=" + e.binDir}, c.want...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			sameFiles(t, confBefore, takeSnapshot(t, e.confDir))
			sameFiles(t, binBefore, takeSnapshot(t, e.binDir))
		})
	}
}
