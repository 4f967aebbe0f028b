package cnifallback

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/cnifallback/install"
)

// istioCNIGrace is how long after taking a node over meshlet looks for
// istio-cni's plugin: istio-cni's agent, uninstalled from the node,
// removes its plugin as it exits, about when it frees ztunnel's socket.
var istioCNIGrace = 5 * time.Second

// IstioCNILeft runs once meshlet has taken the node over from istio-cni's
// node agent: after a grace for that agent's own clean-up, it reports
// istio-cni's plugin wherever it is still chained in cfg.ConfDir, and with
// cfg.RemoveIstioCNI removes it. It returns early when ctx ends.
func IstioCNILeft(ctx context.Context, cfg Config) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(istioCNIGrace):
	}
	logger := klog.FromContext(ctx).WithValues("confDir", cfg.ConfDir)
	found, err := install.ChainedIn(cfg.ConfDir, install.IstioCNIPluginType)
	switch {
	case err != nil:
		logger.Error(err, "Looking for istio-cni's plugin in the CNI configuration")
		return
	case len(found) == 0:
		return
	case !cfg.RemoveIstioCNI:
		logger.Info("istio-cni's plugin is still in the CNI configuration: with its node agent gone, it fails every pod the node starts. Uninstall istio-cni from this node, or set --remove-istio-cni-plugin",
			"files", found)
		return
	}
	// A conflist rewritten meanwhile (by the primary CNI) is read again,
	// a few times.
	for attempt := 1; ; attempt++ {
		removed, err := install.Unchain(cfg.ConfDir, install.IstioCNIPluginType)
		if len(removed) > 0 {
			logger.Info("Removed istio-cni's plugin from the CNI configuration (--remove-istio-cni-plugin); its binary and kubeconfig stay", "files", removed)
		}
		if err == nil {
			return
		}
		if attempt == istioCNIAttempts {
			logger.Error(err, "Removing istio-cni's plugin from the CNI configuration", "attempts", attempt)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// istioCNIAttempts bounds the attempts at removing istio-cni's plugin.
const istioCNIAttempts = 3
