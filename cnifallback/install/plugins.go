package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// BinDirError: --cni-bin-dir is not where the runtime looks plugins up,
// so it would never find meshlet-cni there: chained, meshlet-cni would
// fail every new pod of the node, not only mesh pods. meshlet chains
// nothing then. Either the runtime said where it looks (RuntimeBinDirs),
// or BinDir holds none of the primary network's plugins (Missing).
type BinDirError struct {
	Primary        string   // the primary config
	BinDir         string   // --cni-bin-dir
	RuntimeBinDirs []string // where the runtime says it looks; nil: it did not say
	Missing        []string // the primary's plugin types (and IPAM types), none in BinDir
}

func (e *BinDirError) Error() string {
	const tail = ", so chaining meshlet-cni would fail every new pod of the node. Not chaining: set --cni-bin-dir (the chart's paths.cniBinDir, or its platform) to "
	if e.RuntimeBinDirs != nil {
		return fmt.Sprintf("--cni-bin-dir=%s is not where the runtime looks plugins up (it reports %s)%sone of those", e.BinDir, strings.Join(e.RuntimeBinDirs, ", "), tail)
	}
	return fmt.Sprintf("--cni-bin-dir=%s holds none of the plugins primary CNI config %s runs (%s): the runtime takes its plugins from another directory, where it would not find meshlet-cni either%s"+
		"the runtime's plugin directory (containerd: bin_dirs in its CRI plugin's cni section; CRI-O: plugin_dirs)", e.BinDir, e.Primary, strings.Join(e.Missing, ", "), tail)
}

// checkBinDir refuses a BinDir the runtime does not look plugins up in
// (BinDirError). A directory or primary config not there yet is not its to
// report: the pass that follows says so.
func (in *Installer) checkBinDir(ctx context.Context) error {
	skip := ""
	if in.cfg.OwnConflist {
		skip = OwnConflistName
	}
	sel, err := selectPrimary(in.cfg.ConfDir, skip, in.now())
	if err != nil {
		return nil
	}
	if ask := in.cfg.RuntimeBinDirs; ask != nil {
		if dirs, ok := ask(ctx); ok {
			if slices.ContainsFunc(dirs, func(d string) bool { return sameDir(d, in.cfg.BinDir) }) {
				return nil
			}
			return &BinDirError{Primary: sel.primary.path, BinDir: in.cfg.BinDir, RuntimeBinDirs: dirs}
		}
	}
	types, missing, err := primaryPlugins(in.cfg.BinDir, sel.primary)
	if err != nil || len(types) == 0 || len(missing) < len(types) {
		return err
	}
	return &BinDirError{Primary: sel.primary.path, BinDir: in.cfg.BinDir, Missing: missing}
}

// primaryPlugins lists the plugin types the config f runs (each plugin's
// type and its IPAM's, as libcni execs them), without meshlet-cni, and of
// those the ones dir lacks, sorted.
func primaryPlugins(dir string, f *confFile) (types, missing []string, err error) {
	var plugins []json.RawMessage
	if f.isList() {
		cl, err := parseConflist(f.data)
		if err != nil {
			return nil, nil, fmt.Errorf("primary CNI config %s: %w", f.path, err)
		}
		plugins = cl.plugins
	} else {
		plugins = []json.RawMessage{f.data}
	}
	for _, raw := range plugins {
		for _, typ := range []string{pluginType(raw), ipamType(raw)} {
			if typ == "" || typ == PluginType || slices.Contains(types, typ) {
				continue
			}
			types = append(types, typ)
			if !executableIn(dir, typ) {
				missing = append(missing, typ)
			}
		}
	}
	slices.Sort(missing)
	return types, missing, nil
}

// ipamType is a plugin's ipam.type, "" without one.
func ipamType(raw json.RawMessage) string {
	var p struct {
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return ""
	}
	return p.IPAM.Type
}

// executableIn is whether dir/name is a file (through symlinks) the
// runtime could execute. A name with a path separator is never one: libcni
// looks plugins up by bare name.
func executableIn(dir, name string) bool {
	if strings.ContainsRune(name, filepath.Separator) {
		return false
	}
	fi, err := os.Stat(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) || err != nil {
		return false
	}
	return fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// sameDir is whether a and b name one directory: the same path cleaned,
// or the same once symbolic links are followed (k3s's bin_dir is one).
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	return errA == nil && errB == nil && ra == rb
}
