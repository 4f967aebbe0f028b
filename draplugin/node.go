package draplugin

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// Reasons of a node that cannot enroll pods, as the device taint's value.
const (
	NotReadyRuntime = "runtime-hook-disconnected"
	NotReadyZtunnel = "ztunnel-disconnected"
)

// NodeStateOf is whether new pods can be enrolled: the runtime's hook (NRI,
// or CNI mode's chained plugin) is in place and a ztunnel is connected to
// hand them to.
func NodeStateOf(runtimeConnected func() bool, ztunnels func() int, ztunnelSocket string) func() NodeState {
	return func() NodeState {
		switch {
		case !runtimeConnected():
			return NodeState{Reason: NotReadyRuntime, Message: "meshlet's runtime hook is not in place (NRI not connected, or in CNI mode meshlet-cni not chained and served): pods would not be enrolled"}
		case ztunnels() == 0:
			return NodeState{Reason: NotReadyZtunnel, Message: "no ztunnel is connected to " + ztunnelSocket + ": pods cannot be handed to the mesh"}
		}
		return NodeState{Ready: true}
	}
}

// OpenClaims loads the prepared claims in dir (--state-dir). A corrupt file is set aside
// loudly: the claims it held lose their settings (their pods fall back to
// labels and defaults) but meshlet serves the node. A file of another
// meshlet version stops start-up: replacing it would destroy the claims
// of the release that wrote it (a rollback, or an update's other meshlet).
func OpenClaims(dir string, logger klog.Logger) (*claimstore.Store, error) {
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
