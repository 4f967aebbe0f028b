package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
)

// Uninstall removes what Install added and nothing else: meshlet's entry
// from every conflist in ConfDir that has one (a conflist converted from
// a .conf becomes that .conf again), OwnConflistName, the binary when
// PluginBinary is set (otherwise someone else put it there), and
// temporary files of ours. It is idempotent, and it stops a running Run
// from re-asserting (until the next Install). It removes the entries
// before the binary: the runtime must never be left with an entry whose
// binary is gone.
func (in *Installer) Uninstall(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.disabled = true
	in.installed.Store(false)
	log := klog.FromContext(ctx)
	var errs []error

	names, err := configNames(in.cfg.ConfDir)
	if err != nil && !errors.Is(err, errNoConfDir) {
		errs = append(errs, err)
	}
	for _, name := range names {
		if err := in.unchainFile(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	if in.cfg.PluginBinary != "" && filepath.Clean(in.cfg.PluginBinary) != in.binaryPath() {
		if _, err := os.Lstat(in.binaryPath()); err == nil {
			if err := removeFile(in.binaryPath()); err != nil {
				errs = append(errs, fmt.Errorf("remove plugin binary: %w", err))
			} else {
				log.Info("Removed the meshlet-cni binary", "file", in.binaryPath())
			}
		}
		in.bin = binaryCache{}
	}
	removeStaleTemps(in.cfg.ConfDir, in.now().Add(2*staleTempAge)) // we hold the lock: none is live
	removeStaleTemps(in.cfg.BinDir, in.now().Add(2*staleTempAge))
	return errors.Join(errs...)
}

// unchainFile takes meshlet out of ConfDir/name if it is there.
func (in *Installer) unchainFile(ctx context.Context, name string) error {
	log := klog.FromContext(ctx)
	path := filepath.Join(in.cfg.ConfDir, name)
	info, err := os.Lstat(path)
	if err != nil || !info.Mode().IsRegular() || filepath.Ext(name) != ".conflist" {
		return nil // gone, not a file we write, or not a conflist: not ours to edit
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("uninstall from %s: %w", path, err)
	}
	if name == OwnConflistName {
		if !hasOurEntry(data) {
			return nil // not ours after all
		}
		if err := removeFile(path); err != nil {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		log.Info("Removed meshlet's own conflist", "file", path)
		return nil
	}
	u, found, err := unchain(name, data)
	if !found {
		return nil // not a conflist we can read, or meshlet is not in it
	}
	if err != nil {
		return fmt.Errorf("uninstall from %s: %w", path, err)
	}
	src := &confFile{name: name, path: path, data: data}
	if u.restore == "" {
		if err := in.writeConfig(name, u.data, info.Mode(), src); err != nil {
			return fmt.Errorf("uninstall: %w", err)
		}
		log.Info("Removed meshlet-cni from the CNI config", "file", path)
		return nil
	}
	restorePath := filepath.Join(in.cfg.ConfDir, u.restore)
	if _, err := os.Lstat(restorePath); err == nil {
		// The primary CNI has written its .conf again since: that one is
		// current, and the conflist we made from the old one is all that
		// is ours.
		log.Info("Not restoring the converted CNI config: it exists again", "file", restorePath)
	} else if err := in.writeConfig(u.restore, u.restoreData, info.Mode(), src); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	// Written first, removed second: the runtime always has a config.
	if err := removeFile(path); err != nil {
		return fmt.Errorf("uninstall: remove %s: %w", path, err)
	}
	log.Info("Restored the CNI config meshlet had converted to a conflist", "file", restorePath, "removed", path)
	return nil
}
