package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// departure is why this meshlet may be its node's last (kube.Departure):
// its DaemonSet deleted, or the node no longer selected by it (an
// uninstall on the node: it takes its state off the node); its access to
// the API server forbidden (it cannot tell); else Stays. On an update, a
// restart or a node shutdown the DaemonSet remains and everything stays
// for the next meshlet. The watch has usually seen a deletion already;
// otherwise the API server is asked once. Without meshlet's own pod
// (--pod-name) or an answer, it keeps everything: removing the CNI chain
// or the checkpoint of a meshlet that is only restarting would let mesh
// pods start unmeshed.
func departure(ctx context.Context, cfg Config, api *apiClients, ds *kube.DaemonSetWatch) kube.Departure {
	logger := klog.FromContext(ctx)
	if api == nil || cfg.PodName == "" {
		logger.V(2).Info("Not checking for an uninstall: meshlet's own pod is not known (--pod-name)")
		return kube.Stays
	}
	if ds != nil && ds.Removed() {
		return kube.DaemonSetDeleted
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	why, err := kube.Departing(ctx, api.client, cfg.PodNamespace, cfg.PodName, cfg.NodeName)
	if err != nil {
		logger.Info("Keeping meshlet's state on the node: cannot tell an uninstall from an update", "err", err)
	}
	return why
}

// uninstallParts are what an uninstall takes off the node.
type uninstallParts struct {
	core   *enroll.Core
	source *modeSource
	driver *draplugin.Driver // nil without DRA
	redir  *redirect.Redirector
	// nodeReadiness is the node's taint or condition (nil: neither).
	nodeReadiness *kube.NodeReadiness
}

// onUninstall adds the uninstall steps to the shutdown: whether this
// meshlet's DaemonSet is deleted is asked once, when the pod source has
// stopped; if so, the pods leave the mesh (--unmesh-on-uninstall) or are
// left with Istio's own rules (handBack), and meshlet-cni the CNI chain, then once the DRA plugin has stopped its
// ResourceSlices go, and once the ZDS server has stopped the node-side
// rules, the state files and the container gate.
func onUninstall(ctx context.Context, lc *lifecycle, cfg Config, api *apiClients, ds *kube.DaemonSetWatch, parts uninstallParts) {
	logger := klog.FromContext(ctx)
	uninstall := false
	lc.onStop("uninstall: pods and CNI chain", func() {
		why := departure(ctx, cfg, api, ds)
		uninstall = why == kube.DaemonSetDeleted || why == kube.NodeDeselected
		switch {
		case uninstall:
			logger.Info("Uninstalling from the node: removing meshlet's state", "why", why)
		case why == kube.AccessRevoked:
			// An uninstall that took the role binding first, or an update
			// that renamed the account: safe both ways is to leave no CNI
			// entry refusing the node's pods, and the pods' rules and the
			// checkpoint for a next meshlet, which re-chains at start.
			logger.Info("Cannot tell an uninstall from an update: taking meshlet-cni out of the CNI chain so that no pod is refused while no meshlet serves the node; keeping the pods' rules and the checkpoint", "why", why)
		}
		switch {
		case uninstall && cfg.UnmeshOnUninstall:
			if err := parts.core.UnmeshAll(context.WithoutCancel(ctx)); err != nil {
				logger.Error(err, "Taking pods out of the mesh before uninstalling")
			}
		case uninstall:
			handBack(context.WithoutCancel(ctx), parts)
		}
		switch {
		case uninstall || why == kube.AccessRevoked:
			// In either mode: an entry left behind would fail every pod
			// outside its excluded namespaces. The binary stays.
			removeStaleCNI(context.WithoutCancel(ctx), cfg)
		case parts.source.cniMode():
			logger.Info("Keeping meshlet-cni in the CNI chain: pods outside its excluded namespaces wait for the next meshlet; meshlet uninstall-cni removes it")
		}
	})
	lc.onStop("uninstall: ResourceSlices", func() {
		if uninstall && parts.driver != nil {
			if err := kube.DeleteResourceSlices(context.WithoutCancel(ctx), api.client, cfg.NodeName, cfg.DRA.DriverName); err != nil {
				logger.Error(err, "Deleting the node's mesh ResourceSlices")
			}
		}
	})
	lc.onStop("uninstall: node readiness", func() {
		if uninstall && parts.nodeReadiness != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := parts.nodeReadiness.Remove(ctx); err != nil {
				if cfg.NodeTaint != "" {
					logger.Error(err, "Removing the node's mesh taint: remove it by hand, or no mesh pod is scheduled on the node again",
						"command", "kubectl taint nodes "+cfg.NodeName+" "+cfg.NodeTaint+"-")
				} else {
					logger.Error(err, "Removing the node's mesh condition", "condition", cfg.NodeCondition)
				}
				return
			}
			logger.Info("Removed the node's mesh taint and condition", "taint", cfg.NodeTaint, "condition", cfg.NodeCondition)
		}
	})
	lc.onStop("uninstall: node state", func() {
		if !uninstall {
			return
		}
		removeNodeState(logger, cfg.StateDir, parts.redir)
		if parts.driver != nil {
			if err := cfg.DRA.RemoveGate(); err != nil {
				logger.Error(err, "Removing the container gate's CDI spec and hook")
			}
		}
	})
}

// handBack leaves each running mesh pod with Istio's own in-pod rules in
// place of meshlet's (redirect.HandBack): the node agent installed next,
// istio-cni or a meshlet, adopts rules it knows whole, and ztunnel keeps
// proxying meanwhile.
func handBack(ctx context.Context, parts uninstallParts) {
	logger := klog.FromContext(ctx)
	var n atomic.Int64
	err := parts.core.EachEnrolled(ctx, func(ctx context.Context, w *enroll.Workload) error {
		n.Add(1)
		return parts.redir.HandBack(ctx, w)
	})
	if err != nil {
		logger.Error(err, "Leaving pods with Istio's in-pod rules; those named keep meshlet's, which redirect them to ztunnel alike")
	}
	logger.Info("Left the running mesh pods with Istio's own in-pod rules, for the node agent installed next", "pods", n.Load())
}

// removeNodeState removes the node-side rules (probe SNAT) and the state
// files. Pods keep their redirection (Istio's rules, handBack) until they
// stop, unless --unmesh-on-uninstall released them first. The node lock file stays: it is held until exit.
func removeNodeState(logger klog.Logger, stateDir string, redir *redirect.Redirector) {
	if err := redir.UninstallNode(); err != nil {
		logger.Error(err, "Removing meshlet's node-side rules")
	}
	var errs []error
	for _, name := range []string{state.FileName, claimstore.FileName, live.FileName} {
		if err := os.Remove(filepath.Join(stateDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		logger.Error(err, "Removing meshlet's state files", "stateDir", stateDir)
	}
}
