package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/nodesettings"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/internal/logformat"
)

// flagValues are the node settings meshlet's flags give.
func flagValues(cfg Config) nodesettings.Values {
	return nodesettings.Values{
		ExcludedNamespaces:    slices.Clone(cfg.Policy.ExcludedNamespaces),
		DeniedRuntimeHandlers: slices.Clone(cfg.Policy.DeniedRuntimeHandlers),
		DNSCapture:            cfg.PodDefaults.DNSCapture,
		IPv6:                  cfg.Redirect.IPv6,
		DataplaneModeLabel:    cfg.Policy.DataplaneModeLabel,
		LogVerbosity:          cfg.LogVerbosity,
		EnrollTimeout:         nodesettings.Duration(cfg.NRI.EnrollTimeout),
	}
}

// logVerbosity is -v: klog's verbosity, kept in Config as well so that
// the node settings start from it.
type logVerbosity struct{ dst *int }

func (l logVerbosity) String() string {
	if l.dst == nil {
		return "0"
	}
	return strconv.Itoa(*l.dst)
}

// Set also sets klog's verbosity at once, for what logs before Run (the
// commands, start-up checks); Run sets it again from the node settings.
func (l logVerbosity) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("want a whole number, 0 to %d", nodesettings.MaxLogVerbosity)
	}
	if err := nodesettings.CheckLogVerbosity(n); err != nil {
		return err
	}
	if err := setLogVerbosity(n); err != nil {
		return err
	}
	*l.dst = n
	return nil
}

// setLogVerbosity sets klog's verbosity for the whole process (klog's
// Level.Set sets the global level, whatever its receiver).
func setLogVerbosity(n int) error { return logformat.SetVerbosity(n) }

// policyConfig is base with the node settings' share of the policy.
func policyConfig(base policy.Config, v nodesettings.Values) (policy.Config, error) {
	sel, err := nodesettings.Compile(v.EnablementSelectors)
	if err != nil {
		return policy.Config{}, err
	}
	base.ExcludedNamespaces = v.ExcludedNamespaces
	base.DeniedRuntimeHandlers = v.DeniedRuntimeHandlers
	base.DataplaneModeLabel = v.DataplaneModeLabel
	base.EnablementSelectors = sel
	return base, nil
}

// ipv6Follower is a component that follows the node's IPv6 setting.
type ipv6Follower interface{ SetIPv6(on bool) }

var (
	_ ipv6Follower = (*redirect.Redirector)(nil)
	_ ipv6Follower = (*draplugin.Driver)(nil)
)

// settingsTargets are what the node settings apply to while meshlet runs.
type settingsTargets struct {
	cfg           Config
	policy        *policy.Policy
	core          *enroll.Core
	enrollTimeout *atomic.Int64
	// ipv6Followers are the redirector and, with DRA, the device's
	// attributes.
	ipv6Followers []ipv6Follower
	// cniExcluded is meshlet-cni's entry's share (CNI mode).
	cniExcluded *cnifallback.Exclusions
}

// apply puts v into effect for what starts from now on: the policy's
// share, the pods' default settings, IPv6 redirection (and the DRA
// device's ipv6 attribute), the excluded namespaces in meshlet-cni's entry
// (CNI mode), the enroll timeout and the log verbosity.
// Running pods follow when they are converged again (Reevaluate): those
// whose settings or rules change are re-programmed.
func (t settingsTargets) apply(ctx context.Context, v nodesettings.Values) {
	logger := klog.FromContext(ctx)
	// Documents are validated when read: these fail only on a bug.
	if pc, err := policyConfig(t.cfg.Policy, v); err != nil {
		logger.Error(err, "Node settings: the policy keeps its previous settings")
	} else if err := t.policy.Update(pc); err != nil {
		logger.Error(err, "Node settings: the policy keeps its previous settings")
	}
	defaults := t.cfg.PodDefaults
	defaults.DNSCapture = v.DNSCapture
	t.core.SetDefaults(defaults)
	for _, c := range t.ipv6Followers {
		c.SetIPv6(v.IPv6)
	}
	if t.cniExcluded != nil {
		t.cniExcluded.SetExcludedNamespaces(v.ExcludedNamespaces)
	}
	t.enrollTimeout.Store(int64(v.EnrollTimeout))
	if err := setLogVerbosity(v.LogVerbosity); err != nil {
		logger.Error(err, "Node settings: the log verbosity stays as it was")
	}
}
