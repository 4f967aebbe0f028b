package agent

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/cnifallback/install"
)

// CNIExcluded are the namespaces meshlet-cni's entry lets start while
// meshlet is away: the excluded namespaces and ztunnel's, so the mesh's
// own infrastructure can come up on a node without an agent.
func (c Config) CNIExcluded() []string {
	return append(slices.Clone(c.Policy.ExcludedNamespaces), c.Policy.ZtunnelNamespace)
}

// newCNIMode assembles CNI mode over the core; excluded keeps meshlet-cni's
// entry in step with the node settings.
func newCNIMode(cfg Config, core *enroll.Core, m *metrics.Metrics, redir *redirect.Redirector, excluded *cnifallback.Exclusions) (*cnifallback.Fallback, error) {
	icfg, err := cfg.CNI.InstallerConfig(cfg.CNIExcluded(), true)
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
	excluded.Attach(inst)
	fb = cnifallback.New(cfg.CNI, cnifallback.Deps{Core: core, Installer: inst, Metrics: m,
		DialRuntime: func(ctx context.Context) (cri.Listing, error) { return cri.DialEndpoint(ctx, cfg.CNI.CRISocket) },
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
// namespaces. The binary stays (a runtime may still run it for an old pod's DEL).
func removeStaleCNI(ctx context.Context, cfg Config) {
	if err := cnifallback.RemoveFromChain(ctx, cfg.CNI, cfg.CNIExcluded()); err != nil {
		klog.FromContext(ctx).Error(err, "Removing meshlet-cni from the CNI chain (NRI serves this node)", "confDir", cfg.CNI.ConfDir)
	}
}

// errStandaloneCNI: CNI passes no labels, so CNI mode needs the API server.
var errStandaloneCNI = errors.New("the runtime offers no NRI and CNI mode needs the API server (CNI passes no pod labels to select pods by): drop --standalone, or enable NRI in the runtime")
