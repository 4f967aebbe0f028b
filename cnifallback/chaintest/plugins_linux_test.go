package chaintest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/meshlet/meshlet/internal/privtest"
)

// debianPlugins are the CNI plugins the e2e runtime uses.
const debianPlugins = "/usr/lib/cni"

// upstreamEnv names the directory of upstream plugins install.sh prints:
// Debian's speak at most 1.0.0.
const upstreamEnv = "MESHLET_CNI_PLUGINS"

// passthrough is the smallest Go chained plugin (testdata/passthrough).
const passthrough = "passthrough"

// interfacePlugins are the plugins of the pod network meshlet-cni is
// chained after, linked next to it.
var interfacePlugins = []string{"bridge", "host-local", "loopback"}

// built holds meshlet-cni, built once for the package, and one directory
// per plugin source with the plugin and the interface plugins linked in.
var built struct {
	mu     sync.Mutex
	root   string
	plugin string
	dirs   map[string]string
	speaks map[string][]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.root != "" {
		os.RemoveAll(built.root)
	}
	os.Exit(code)
}

// specVersions are the versions of the CNI library that chaining has:
// those with a prevResult (0.3.0 on).
func specVersions(t testing.TB) []string {
	var out []string
	for _, v := range version.All.SupportedVersions() {
		ok, err := version.GreaterThanOrEqualTo(v, "0.3.0")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out = append(out, v)
		}
	}
	return out
}

// pluginDir returns a directory holding meshlet-cni and interface plugins
// that speak spec version v: Debian's where they do, else upstream's.
func pluginDir(t testing.TB, v string) string {
	t.Helper()
	privtest.RequireRoot(t)
	privtest.RequireFile(t, filepath.Join(debianPlugins, "bridge"), "Debian's containernetworking-plugins; cnifallback/chaintest/install.sh installs it")
	built.mu.Lock()
	defer built.mu.Unlock()
	src := debianPlugins
	if !slices.Contains(speaks(t, src), v) {
		src = privtest.RequireEnv(t, upstreamEnv, fmt.Sprintf("Debian's CNI plugins do not speak %s; cnifallback/chaintest/install.sh builds upstream's and prints their directory; `make test` sets it", v))
		if !slices.Contains(speaks(t, src), v) {
			t.Fatalf("the CNI plugins in %s do not speak %s either (they speak %v)", src, v, speaks(t, src))
		}
	}
	if d := built.dirs[src]; d != "" {
		return d
	}
	if built.root == "" {
		root, err := os.MkdirTemp("", "mlchain-bin")
		if err != nil {
			t.Fatal(err)
		}
		built.root = root
	}
	if built.plugin == "" {
		bin := filepath.Join(built.root, "meshlet-cni")
		// As it is shipped: static, stripped.
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/meshlet/meshlet/cmd/meshlet-cni")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build meshlet-cni: %v\n%s", err, out)
		}
		built.plugin = bin
		// The floor any Go chained plugin pays (the benchmark's baseline).
		cmd = exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(built.root, passthrough), "./testdata/passthrough")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", passthrough, err, out)
		}
	}
	dir := filepath.Join(built.root, fmt.Sprintf("bin%d", len(built.dirs)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"meshlet-cni": built.plugin, passthrough: filepath.Join(built.root, passthrough)}
	for _, p := range interfacePlugins {
		links[p] = filepath.Join(src, p)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if built.dirs == nil {
		built.dirs = map[string]string{}
	}
	built.dirs[src] = dir
	return dir
}

// speaks returns the spec versions every interface plugin in dir speaks
// (what they answer to VERSION). built.mu is held.
func speaks(t testing.TB, dir string) []string {
	t.Helper()
	if v, ok := built.speaks[dir]; ok {
		return v
	}
	var common []string
	for i, p := range interfacePlugins {
		info, err := invoke.GetVersionInfo(context.Background(), filepath.Join(dir, p), nil)
		if err != nil {
			t.Fatalf("%s/%s: VERSION: %v", dir, p, err)
		}
		if i == 0 {
			common = info.SupportedVersions()
			continue
		}
		common = slices.DeleteFunc(common, func(v string) bool { return !slices.Contains(info.SupportedVersions(), v) })
	}
	if built.speaks == nil {
		built.speaks = map[string][]string{}
	}
	built.speaks[dir] = common
	return common
}
