package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/cnifallback/cri"
	"github.com/meshlet/meshlet/cnifallback/install"
)

// installConfig is the installer's configuration: the plugin's entry
// names the agent's socket and the namespaces that start while the agent
// is away (the node's excluded namespaces and ztunnel's, so the mesh's
// own infrastructure can come up on a node without an agent). withBinary
// adds the meshlet-cni binary to install (and to remove on uninstall).
func installConfig(cfg Config, withBinary bool) (install.Config, error) {
	exclude := append(slices.Clone(cfg.Policy.ExcludedNamespaces), cfg.Policy.ZtunnelNamespace)
	icfg := install.Config{ConfDir: cfg.CNI.ConfDir, BinDir: cfg.CNI.BinDir, AgentSocket: cfg.CNI.Socket,
		ExcludeNamespaces: exclude, OwnConflist: cfg.CNI.OwnConflist}
	if !withBinary {
		return icfg, nil
	}
	bin, err := pluginSource(cfg)
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
func pluginSource(cfg Config) (string, error) {
	if cfg.CNI.PluginBinary != "" {
		return cfg.CNI.PluginBinary, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("--cni-plugin-binary: locating meshlet's executable: %w", err)
	}
	return filepath.Join(filepath.Dir(exe), install.PluginType), nil
}

// newCNIMode assembles CNI mode over the core; excluded keeps meshlet-cni's
// entry in step with the node settings.
func newCNIMode(cfg Config, core *enroll.Core, m *metrics.Metrics, redir *redirect.Redirector, excluded *cniExclusions) (*cnifallback.Fallback, error) {
	icfg, err := installConfig(cfg, true)
	if err != nil {
		return nil, err
	}
	var fb *cnifallback.Fallback
	icfg.OnReassert = func(trigger string, _ time.Duration) {
		// The first install is not a re-assert, nor a rewrite for new
		// node settings.
		if trigger != "start" && trigger != "settings" {
			m.CNIReasserted()
		}
		// A pod set up while the entry was missing started outside the
		// chain: list the runtime's pods soon to enroll it.
		fb.Resync()
	}
	inst, err := install.New(icfg)
	if err != nil {
		return nil, err
	}
	excluded.attach(inst)
	fb = cnifallback.New(cfg.CNI, cnifallback.Deps{Core: core, Installer: inst, Metrics: m,
		DialRuntime: func(ctx context.Context) (cnifallback.Lister, error) {
			if cfg.CNI.CRISocket != "" {
				return cri.Dial(ctx, cfg.CNI.CRISocket)
			}
			endpoint, err := cri.Find(ctx, cri.DefaultEndpoints)
			if err != nil {
				return nil, err
			}
			return cri.Dial(ctx, endpoint)
		},
		AfterSync: func(ctx context.Context) {
			if err := redir.RetainNodeState(core.EnrolledIPs()); err != nil {
				klog.FromContext(ctx).Error(err, "Cleaning node-side state of pods removed while meshlet was away")
			}
		}})
	return fb, nil
}

// removeStaleCNI takes meshlet-cni out of the CNI chain on a node served
// through NRI (the runtime gained NRI since meshlet last ran in CNI mode,
// or it was installed by hand): nothing serves its socket in NRI mode, so
// an entry left behind would fail every pod outside its excluded
// namespaces. The binary stays (see uninstallCNIOnStop).
func removeStaleCNI(ctx context.Context, cfg Config) {
	icfg, err := installConfig(cfg, false)
	if err == nil {
		err = uninstall(ctx, icfg)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Removing meshlet-cni from the CNI chain (NRI serves this node)", "confDir", cfg.CNI.ConfDir)
	}
}

func uninstall(ctx context.Context, icfg install.Config) error {
	inst, err := install.New(icfg)
	if err != nil {
		return err
	}
	return inst.Uninstall(ctx)
}

// errStandaloneCNI: CNI passes no labels, so CNI mode needs the API server.
var errStandaloneCNI = errors.New("the runtime offers no NRI and CNI mode needs the API server (CNI passes no pod labels to select pods by): drop --standalone, or enable NRI in the runtime")

// InstallCNI chains meshlet-cni once (meshlet install-cni), for nodes
// prepared before meshlet runs: from then on the runtime refuses pods
// outside the plugin's excluded namespaces until meshlet serves them.
func InstallCNI(ctx context.Context, cfg Config) error {
	if err := cfg.CNI.Validate(); err != nil {
		return err
	}
	icfg, err := installConfig(cfg, true)
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

// UninstallCNI removes what the installer added, the binary included
// (meshlet uninstall-cni). Run it with meshlet stopped: a running meshlet
// in CNI mode puts its entry back.
func UninstallCNI(ctx context.Context, cfg Config) error {
	if err := cfg.CNI.Validate(); err != nil {
		return err
	}
	icfg, err := installConfig(cfg, false)
	if err != nil {
		return err
	}
	// With its source named, Uninstall removes the copy in BinDir; the
	// source itself need not exist any more.
	if icfg.PluginBinary, err = pluginSource(cfg); err != nil {
		return err
	}
	if err := uninstall(ctx, icfg); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("meshlet-cni removed from the CNI chain", "confDir", cfg.CNI.ConfDir, "binDir", cfg.CNI.BinDir)
	return nil
}
