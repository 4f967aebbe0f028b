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
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/cnifallback/cri"
	"github.com/meshlet/meshlet/cnifallback/install"
)

// installConfig is the installer's configuration: the plugin's entry
// names the agent's socket and the namespaces that start while the agent
// is away (the node's excluded namespaces and ztunnel's, so the mesh's
// own infrastructure can come up on a node without an agent).
func installConfig(cfg Config) (install.Config, error) {
	bin := cfg.CNI.PluginBinary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return install.Config{}, fmt.Errorf("--cni-plugin-binary: locating meshlet's executable: %w", err)
		}
		bin = filepath.Join(filepath.Dir(exe), install.PluginType)
	}
	if fi, err := os.Stat(bin); err != nil || !fi.Mode().IsRegular() {
		return install.Config{}, fmt.Errorf("--cni-plugin-binary=%q: the meshlet-cni binary to install is not there: %v", bin, err)
	}
	exclude := append(slices.Clone(cfg.Policy.ExcludedNamespaces), cfg.Policy.ZtunnelNamespace)
	return install.Config{ConfDir: cfg.CNI.ConfDir, BinDir: cfg.CNI.BinDir, PluginBinary: bin, AgentSocket: cfg.CNI.Socket,
		ExcludeNamespaces: exclude, OwnConflist: cfg.CNI.OwnConflist}, nil
}

// newCNIMode assembles CNI mode over the core.
func newCNIMode(cfg Config, core *enroll.Core, m *metrics, redir *redirect.Redirector) (*cnifallback.Fallback, *install.Installer, error) {
	icfg, err := installConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	var fb *cnifallback.Fallback
	icfg.OnReassert = func(trigger string, _ time.Duration) {
		if trigger == "start" {
			return // the first install, not a re-assert
		}
		m.cniReasserts.Inc()
		// A pod set up while the entry was missing started outside the
		// chain: list the runtime's pods soon to enroll it.
		fb.Resync()
	}
	inst, err := install.New(icfg)
	if err != nil {
		return nil, nil, err
	}
	fb = cnifallback.New(cfg.CNI, cnifallback.Deps{Core: core, Installer: inst, Metrics: m,
		DialRuntime: func(ctx context.Context) (cnifallback.Lister, error) {
			endpoint, err := criEndpoint(ctx, cfg)
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
	return fb, inst, nil
}

// uninstallCNIOnStop removes meshlet-cni from the chain when meshlet's
// DaemonSet is being deleted, and keeps it otherwise: on an update, a
// restart or a node shutdown the plugin stays, so mesh pods wait for the
// next meshlet (they fail closed) instead of starting unmeshed.
func uninstallCNIOnStop(cfg Config, api *apiClients, inst *install.Installer, logger klog.Logger) {
	keep := func(why string) {
		logger.Info("Keeping meshlet-cni in the CNI chain: mesh pods wait for the next meshlet", "why", why)
	}
	if api == nil || cfg.PodName == "" {
		keep("meshlet's own pod is not known (--pod-name); remove it with meshlet uninstall-cni")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	removed, err := kube.DaemonSetRemoved(ctx, api.client, cfg.PodNamespace, cfg.PodName)
	if err != nil {
		keep(err.Error())
		return
	}
	if !removed {
		keep("meshlet's DaemonSet remains (an update or a restart)")
		return
	}
	if err := inst.Uninstall(ctx); err != nil {
		logger.Error(err, "Removing meshlet-cni from the CNI chain: remove it with meshlet uninstall-cni")
		return
	}
	logger.Info("Removed meshlet-cni from the CNI chain: meshlet's DaemonSet is deleted")
}

// errStandaloneCNI: CNI passes no labels, so CNI mode needs the API server.
var errStandaloneCNI = errors.New("the runtime offers no NRI and CNI mode needs the API server (CNI passes no pod labels to select pods by): drop --standalone, or enable NRI in the runtime")

// InstallCNI chains meshlet-cni once (meshlet install-cni), for nodes
// prepared before meshlet runs: from then on the runtime refuses mesh pods
// until meshlet serves them.
func InstallCNI(ctx context.Context, cfg Config) error {
	inst, err := cniInstaller(cfg)
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

// UninstallCNI removes what the installer added (meshlet uninstall-cni).
func UninstallCNI(ctx context.Context, cfg Config) error {
	inst, err := cniInstaller(cfg)
	if err != nil {
		return err
	}
	if err := inst.Uninstall(ctx); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("meshlet-cni removed from the CNI chain", "confDir", cfg.CNI.ConfDir, "binDir", cfg.CNI.BinDir)
	return nil
}

func cniInstaller(cfg Config) (*install.Installer, error) {
	if err := cfg.CNI.Validate(); err != nil {
		return nil, err
	}
	icfg, err := installConfig(cfg)
	if err != nil {
		return nil, err
	}
	return install.New(icfg)
}
