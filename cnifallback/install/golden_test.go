package install

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*/out (and uninstalled) from what Install and Uninstall do")

// goldenCases are the directories under testdata/golden: in/ is ConfDir
// before Install, out/ after it, and uninstalled/ (when Uninstall cannot
// give back in/, because in/ had a stale entry) after Uninstall.
var goldenCases = []struct {
	name string
	own  bool
}{
	{"bridge", false}, // bridge (host-local IPAM) + portmap; disableCheck and disableGC kept
	{"calico", false}, // calico, portmap, bandwidth; name before cniVersion kept
	{"cilium", false}, // 05-cilium.conflist, cilium-cni alone
	{"conf", false},   // 10-bridge.conf → 10-bridge.conflist, convertedFrom recorded
	{"stale", false},  // an old meshlet entry in the middle: one entry, last, new socket
	{"own", true},     // --cni-own-conflist: 05-meshlet.conflist, the primary untouched
}

// TestGolden: Install turns in/ into out/ byte for byte, and Uninstall
// gives back in/ byte for byte (the inputs are in the two-space layout
// Install writes; see TestUninstallOtherFormatting for the others).
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			base := filepath.Join("testdata", "golden", tc.name)
			e := newEnv(t)
			copyDir(t, filepath.Join(base, "in"), e.confDir)
			cfg := e.config()
			cfg.OwnConflist = tc.own
			in := newInstaller(t, cfg)
			ctx := testCtx(t)
			out, err := in.Install(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !out.Wrote || !out.BinaryWrote || !in.Installed() {
				t.Errorf("Install: %+v, installed %v", out, in.Installed())
			}
			compareDir(t, e.confDir, filepath.Join(base, "out"))
			if !fileChainedLast(out.Conflist, testSocket) {
				t.Errorf("%s: meshlet not chained last", out.Conflist)
			}
			if err := in.Uninstall(ctx); err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(base, "uninstalled")
			if tc.name != "stale" {
				want = filepath.Join(base, "in")
			}
			compareDir(t, e.confDir, want)
			if _, err := os.Lstat(filepath.Join(e.binDir, PluginType)); !os.IsNotExist(err) {
				t.Errorf("binary still there after Uninstall: %v", err)
			}
		})
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(to, e.Name())
		writeFile(t, p, readFile(t, filepath.Join(from, e.Name())), 0o644)
		aged(t, p)
	}
}

// compareDir compares got's files with want's byte for byte (or, with
// -update, makes want a copy of got).
func compareDir(t *testing.T, got, want string) {
	t.Helper()
	files := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil && !(*update && os.IsNotExist(err)) {
			t.Fatal(err)
		}
		var n []string
		for _, e := range ents {
			n = append(n, e.Name())
		}
		return n
	}
	if *update && filepath.Base(want) != "in" {
		if err := os.RemoveAll(want); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(want, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range files(got) {
			writeFile(t, filepath.Join(want, n), readFile(t, filepath.Join(got, n)), 0o644)
		}
		return
	}
	g, w := files(got), files(want)
	if !slices.Equal(g, w) {
		t.Fatalf("files %q, want %q (%s)", g, w, want)
	}
	for _, n := range g {
		gb, wb := readFile(t, filepath.Join(got, n)), readFile(t, filepath.Join(want, n))
		if !bytes.Equal(gb, wb) {
			t.Errorf("%s differs from %s:\n%s\nwant\n%s", n, filepath.Join(want, n), gb, wb)
		}
	}
}
