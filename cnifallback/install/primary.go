package install

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// configExts are the extensions the runtimes load (libcni.ConfFiles as
// containerd and CRI-O call it).
var configExts = []string{".conf", ".conflist", ".json"}

func isConfigName(name string) bool {
	return slices.Contains(configExts, filepath.Ext(name))
}

// maxConfigSize bounds what we read: a CNI config is a few KiB.
const maxConfigSize = 1 << 20

// settleTime: a file that does not parse and changed less than this ago
// is probably being written in place (truncate, then write). Skipping it
// would make the next file the primary for an instant, and we would edit
// (or, with OwnConflist, copy) the wrong network's config; we wait for it
// to settle instead, and skip it only if it stays broken.
const settleTime = time.Second

var (
	errNoConfDir = errors.New("the CNI config directory does not exist yet")
	errNoPrimary = errors.New("no valid CNI config yet")
	errSettling  = errors.New("a CNI config is being written")
)

// confFile is one config file as read.
type confFile struct {
	name string
	path string
	data []byte
	info fs.FileInfo // Lstat: a symlink shows as one
	// dirPlugins counts the plugins libcni adds from the directory named
	// after the network: they would run after anything we append.
	dirPlugins int
}

func (f *confFile) isList() bool { return filepath.Ext(f.name) == ".conflist" }

// skip is a config file the runtime would not load, and why.
type skip struct{ name, reason string }

// selection is the primary and the files skipped before it.
type selection struct {
	primary *confFile
	skipped []skip
}

// configNames lists dir's config files in lexical order, as the runtimes
// do (libcni.ConfFiles, then sort.Strings).
func configNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir) // sorted by name
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, errNoConfDir)
	}
	if err != nil {
		return nil, fmt.Errorf("read CNI config directory: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && isConfigName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// selectPrimary finds the config the runtime would use: the first file in
// lexical order that loads. skipName (OwnConflistName in OwnConflist mode)
// is passed over: it is ours, not the primary CNI's.
func selectPrimary(dir, skipName string, now time.Time) (selection, error) {
	var sel selection
	names, err := configNames(dir)
	if err != nil {
		return sel, err
	}
	for _, name := range names {
		if name == skipName {
			continue
		}
		f, err := loadConfig(dir, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			if f != nil && now.Sub(f.info.ModTime()) < settleTime {
				return sel, fmt.Errorf("%s does not load yet (%v) and changed %v ago: %w", name, err, now.Sub(f.info.ModTime()).Round(time.Millisecond), errSettling)
			}
			sel.skipped = append(sel.skipped, skip{name, err.Error()})
			continue
		}
		sel.primary = f
		return sel, nil
	}
	if len(sel.skipped) == 0 {
		return sel, fmt.Errorf("%s has no .conf, .conflist or .json file: %w", dir, errNoPrimary)
	}
	var reasons []string
	for _, s := range sel.skipped {
		reasons = append(reasons, s.name+": "+s.reason)
	}
	return sel, fmt.Errorf("%s: none loads (%s): %w", dir, strings.Join(reasons, "; "), errNoPrimary)
}

// loadConfig reads dir/name and checks it as the runtime would load it.
// The returned confFile is set (for its mtime) even when the error says
// the runtime would skip the file.
func loadConfig(dir, name string) (*confFile, error) {
	path := filepath.Join(dir, name)
	info, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	f := &confFile{name: name, path: path, info: info}
	fh, err := os.Open(path)
	if err != nil {
		return f, err
	}
	defer fh.Close()
	f.data, err = io.ReadAll(io.LimitReader(fh, maxConfigSize+1))
	if err != nil {
		return f, err
	}
	if len(f.data) > maxConfigSize {
		return f, fmt.Errorf("larger than %d bytes", maxConfigSize)
	}
	if !f.isList() {
		// What containerd and CRI-O call (ConfFromBytes, deprecated, is
		// this): it insists on a "type", as containerd does.
		if _, err := libcni.NetworkPluginConfFromBytes(f.data); err != nil {
			return f, err
		}
		return f, nil
	}
	list, err := libcni.ConfListFromBytes(f.data)
	if err != nil {
		// Our parser names the field at fault more plainly.
		if _, perr := parseConflist(f.data); perr != nil {
			return f, perr
		}
		return f, err
	}
	if !list.LoadOnlyInlinedPlugins {
		// libcni.ConfListFromFile appends dir/<name>/*.conf.
		dirPlugins, err := libcni.NetworkPluginConfsFromFiles(dir, list.Name)
		if err != nil {
			return f, err
		}
		f.dirPlugins = len(dirPlugins)
	}
	if len(list.Plugins)+f.dirPlugins == 0 {
		return f, errors.New("no plugins")
	}
	return f, nil
}
