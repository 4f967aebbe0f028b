package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// PluginsMissingError: the primary network's plugins are not in the
// plugin directory meshlet was given. The runtime runs them from another
// (BinDir is wrong for this node), and so it would never find meshlet-cni
// there either: chained, it would fail every new pod of the node, not
// only mesh pods. meshlet chains nothing then.
type PluginsMissingError struct {
	Primary string   // the primary config
	BinDir  string   // --cni-bin-dir
	Missing []string // plugin types (and IPAM types) not in BinDir
}

func (e *PluginsMissingError) Error() string {
	return fmt.Sprintf("primary CNI config %s runs plugins that are not in --cni-bin-dir=%s (%s): the runtime takes its plugins from another directory, "+
		"where it would not find meshlet-cni either, so chaining it would fail every new pod of the node. Not chaining: set --cni-bin-dir "+
		"(the chart's paths.cniBinDir, or its platform) to the runtime's plugin directory (containerd: bin_dir or bin_dirs of its CRI "+
		"plugin's cni section; CRI-O: plugin_dirs)", e.Primary, e.BinDir, strings.Join(e.Missing, ", "))
}

// checkPrimaryPlugins refuses a primary config whose plugins BinDir does
// not hold (PluginsMissingError). A directory or primary not there yet is
// not its to report: the pass that follows says so.
func (in *Installer) checkPrimaryPlugins() error {
	skip := ""
	if in.cfg.OwnConflist {
		skip = OwnConflistName
	}
	sel, err := selectPrimary(in.cfg.ConfDir, skip, in.now())
	if err != nil {
		return nil
	}
	missing, err := missingPlugins(in.cfg.BinDir, sel.primary)
	if err != nil || len(missing) == 0 {
		return err
	}
	return &PluginsMissingError{Primary: sel.primary.path, BinDir: in.cfg.BinDir, Missing: missing}
}

// missingPlugins lists the plugin types the config f runs (each plugin's
// type and its IPAM's, as libcni execs them) that dir lacks, sorted and
// without meshlet-cni (copied there next).
func missingPlugins(dir string, f *confFile) ([]string, error) {
	var plugins []json.RawMessage
	if f.isList() {
		cl, err := parseConflist(f.data)
		if err != nil {
			return nil, fmt.Errorf("primary CNI config %s: %w", f.path, err)
		}
		plugins = cl.plugins
	} else {
		plugins = []json.RawMessage{f.data}
	}
	var missing []string
	for _, raw := range plugins {
		for _, typ := range []string{pluginType(raw), ipamType(raw)} {
			if typ == "" || typ == PluginType || slices.Contains(missing, typ) {
				continue
			}
			if !executableIn(dir, typ) {
				missing = append(missing, typ)
			}
		}
	}
	slices.Sort(missing)
	return missing, nil
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
