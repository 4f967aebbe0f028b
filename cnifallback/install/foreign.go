package install

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// IstioCNIPluginType is the type of istio-cni's plugin in a conflist. With
// istio-cni's node agent gone, the plugin fails every pod the node starts
// (it cannot reach the agent), so a node meshlet took over from istio-cni
// must not keep it.
const IstioCNIPluginType = "istio-cni"

// ChainedIn returns the conflists in dir that chain a plugin of type typ.
// Files that are not conflists the runtime would load are passed over, and
// a directory that does not exist has none.
func ChainedIn(dir, typ string) ([]string, error) {
	names, err := configNames(dir)
	if errors.Is(err, errNoConfDir) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range names {
		if _, cl, ok := readConflist(dir, name); ok {
			if _, found := cl.splitType(typ); len(found) > 0 {
				out = append(out, filepath.Join(dir, name))
			}
		}
	}
	return out, nil
}

// Unchain takes every plugin of type typ out of the conflists in dir, each
// file rewritten at once (a temporary file renamed over it), and returns
// the files it changed. A conflist with no other plugin is left as it is
// and named in the error: without it the runtime would have no network.
func Unchain(dir, typ string) ([]string, error) {
	names, err := configNames(dir)
	if err != nil {
		return nil, err
	}
	var changed []string
	var errs []error
	for _, name := range names {
		f, cl, ok := readConflist(dir, name)
		if !ok {
			continue
		}
		others, found := cl.splitType(typ)
		switch {
		case len(found) == 0:
			continue
		case len(others) == 0:
			errs = append(errs, fmt.Errorf("%s: %s is its only plugin: left as it is", f.path, typ))
			continue
		}
		out, err := cl.render(others)
		if err == nil {
			err = writeDerived(atomicfile.WriteWith, dir, name, out, f.info.Mode(), f)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove %s from %s: %w", typ, f.path, err))
			continue
		}
		changed = append(changed, f.path)
	}
	return changed, errors.Join(errs...)
}

// readConflist reads and parses dir/name, a regular .conflist file the
// runtime would load.
func readConflist(dir, name string) (*confFile, *conflist, bool) {
	f, err := loadConfig(dir, name)
	if err != nil || !f.isList() || !f.info.Mode().IsRegular() {
		return nil, nil, false
	}
	cl, err := parseConflist(f.data)
	if err != nil {
		return nil, nil, false
	}
	return f, cl, true
}
