package cnifallback

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/cnifallback/install"
)

// InstallerConfig is the installer's configuration: the plugin's entry
// names the agent's socket and exclude, the namespaces whose pods start
// while the agent is away (the node's excluded namespaces and ztunnel's,
// so the mesh's own infrastructure can come up on a node without an
// agent). withBinary adds the meshlet-cni binary to install (and to remove
// on uninstall).
func (c Config) InstallerConfig(exclude []string, withBinary bool) (install.Config, error) {
	icfg := install.Config{ConfDir: c.ConfDir, BinDir: c.BinDir, AgentSocket: c.Socket,
		ExcludeNamespaces: slices.Clone(exclude), OwnConflist: c.OwnConflist}
	if !withBinary {
		return icfg, nil
	}
	bin, err := c.pluginSource()
	if err != nil {
		return install.Config{}, err
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return install.Config{}, fmt.Errorf("--cni-plugin-binary=%q: the meshlet-cni binary to install: %w", bin, err)
	}
	if !fi.Mode().IsRegular() {
		return install.Config{}, fmt.Errorf("--cni-plugin-binary=%q: the meshlet-cni binary to install is not a regular file", bin)
	}
	icfg.PluginBinary = bin
	return icfg, nil
}

// pluginSource is the meshlet-cni binary meshlet installs: --cni-plugin-binary,
// or meshlet-cni next to meshlet's executable.
func (c Config) pluginSource() (string, error) {
	if c.PluginBinary != "" {
		return c.PluginBinary, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("--cni-plugin-binary: locating meshlet's executable: %w", err)
	}
	return filepath.Join(filepath.Dir(exe), install.PluginType), nil
}

// RemoveFromChain takes meshlet-cni out of the runtime's CNI
// configuration; the binary stays (a runtime may still run it for an old
// pod's DEL).
func RemoveFromChain(ctx context.Context, c Config, exclude []string) error {
	icfg, err := c.InstallerConfig(exclude, false)
	if err != nil {
		return err
	}
	return uninstall(ctx, icfg)
}

func uninstall(ctx context.Context, icfg install.Config) error {
	inst, err := install.New(icfg)
	if err != nil {
		return err
	}
	return inst.Uninstall(ctx)
}

// Install chains meshlet-cni once (meshlet install-cni), for nodes
// prepared before meshlet runs: from then on the runtime refuses pods
// outside the plugin's excluded namespaces until meshlet serves them.
func Install(ctx context.Context, c Config, exclude []string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	icfg, err := c.InstallerConfig(exclude, true)
	if err != nil {
		return err
	}
	inst, err := install.New(icfg)
	if err != nil {
		return err
	}
	out, err := inst.Install(ctx)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("meshlet-cni chained", "conflist", out.Conflist, "wrote", out.Wrote, "binaryWrote", out.BinaryWrote)
	return nil
}

// Uninstall removes what the installer added, the binary included
// (meshlet uninstall-cni). Run it with meshlet stopped: a running meshlet
// in CNI mode puts its entry back.
func Uninstall(ctx context.Context, c Config, exclude []string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	// A mistyped directory would otherwise report meshlet-cni removed
	// from a chain it never saw.
	if fi, err := os.Stat(c.ConfDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--cni-conf-dir=%q does not exist: nothing to remove", c.ConfDir)
	} else if err != nil {
		return fmt.Errorf("--cni-conf-dir=%q: %w", c.ConfDir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--cni-conf-dir=%q: not a directory", c.ConfDir)
	}
	icfg, err := c.InstallerConfig(exclude, false)
	if err != nil {
		return err
	}
	// With its source named, Uninstall removes the copy in BinDir; the
	// source itself need not exist any more.
	if icfg.PluginBinary, err = c.pluginSource(); err != nil {
		return err
	}
	if err := uninstall(ctx, icfg); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("meshlet-cni removed from the CNI chain", "confDir", c.ConfDir, "binDir", c.BinDir)
	return nil
}
