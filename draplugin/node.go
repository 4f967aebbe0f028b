package draplugin

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/draplugin/claimstore"
)

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
