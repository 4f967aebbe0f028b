package agent

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// claimPolicy makes a pod with a prepared mesh claim must-mesh: the claim
// selects it whatever its labels say. Other pods are decided by labels.
type claimPolicy struct {
	labels *policy.Policy
	claims *claimstore.Store
}

var _ enroll.Policy = claimPolicy{}

func (p claimPolicy) Decide(pod *enroll.Pod, info enroll.PodInfo) enroll.Decision {
	switch {
	case p.claims.Claimed(pod.UID):
		// Prepared for this pod: Prepare refused it if it could not hold
		// the claim.
		return p.labels.DecideClaimed(pod, info)
	case len(p.claims.Of(pod, info)) > 0 && p.labels.ClaimConflict(pod, info) == nil:
		// It joined a shared claim after the kubelet prepared it (the
		// kubelet prepares a claim once), so no Prepare checked it here; a
		// pod that could not hold the claim is decided by its labels.
		return p.labels.DecideClaimed(pod, info)
	}
	return p.labels.Decide(pod, info)
}

// statusReporters reports to each in turn (each queues; none blocks).
type statusReporters []enroll.StatusReporter

func (rs statusReporters) Report(pod enroll.PodRef, st enroll.RedirectionStatus) {
	for _, r := range rs {
		r.Report(pod, st)
	}
}

// Reasons of a node that cannot enroll pods, as the device taint's value.
const (
	notReadyRuntime = "runtime-hook-disconnected"
	notReadyZtunnel = "ztunnel-disconnected"
)

// nodeState is whether new pods can be enrolled: the runtime's hook (NRI,
// or CNI mode's chained plugin) is in place and a ztunnel is connected to
// hand them to.
func nodeState(runtimeConnected func() bool, ztunnels func() int, ztunnelSocket string) func() draplugin.NodeState {
	return func() draplugin.NodeState {
		switch {
		case !runtimeConnected():
			return draplugin.NodeState{Reason: notReadyRuntime, Message: "meshlet's runtime hook is not in place (NRI not connected, or in CNI mode meshlet-cni not chained and served): pods would not be enrolled"}
		case ztunnels() == 0:
			return draplugin.NodeState{Reason: notReadyZtunnel, Message: "no ztunnel is connected to " + ztunnelSocket + ": pods cannot be handed to the mesh"}
		}
		return draplugin.NodeState{Ready: true}
	}
}

// openClaims loads the prepared claims. A corrupt file is set aside
// loudly: the claims it held lose their settings (their pods fall back to
// labels and defaults) but meshlet serves the node. A file of another
// meshlet version stops start-up: replacing it would destroy the claims
// of the release that wrote it (a rollback, or an update's other meshlet).
func openClaims(dir string, logger klog.Logger) (*claimstore.Store, error) {
	store, err := claimstore.Open(dir)
	if errors.Is(err, claimstore.ErrCorrupt) {
		dst, rerr := claimstore.Reset(dir, time.Now())
		if rerr != nil {
			return nil, fmt.Errorf("%w (and setting it aside failed: %w)", err, rerr)
		}
		logger.Error(err, "Prepared-claims file set aside: claims prepared before this start lost their mesh settings", "setAside", dst)
		store, err = claimstore.Open(dir)
	}
	if errors.Is(err, claimstore.ErrVersion) {
		return nil, fmt.Errorf("%w: run the meshlet release that wrote it, or remove it with the node drained of mesh pods (their claims' settings are lost)", err)
	}
	if err != nil {
		return nil, err
	}
	if n := store.Len(); n > 0 {
		logger.Info("Prepared mesh claims loaded", "claims", n)
	}
	return store, nil
}
