package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/nriplugin"
)

// nriGrace is how long --mode auto keeps probing the NRI socket once the
// runtime answers on CRI: a runtime that is still starting may serve CRI
// a moment before its NRI socket.
const nriGrace = 2 * time.Second

// selectMode resolves --mode auto: NRI when the runtime's NRI socket
// answers; CNI when the runtime answers on its CRI socket but not on NRI
// (NRI disabled, or a runtime without it). With neither answering it
// waits: after a reboot meshlet may start before the runtime, and
// guessing then would pick the wrong mode for the node's lifetime.
func selectMode(ctx context.Context, cfg Config) (Mode, string, error) {
	if cfg.Mode != ModeAuto {
		return cfg.Mode, "--mode=" + string(cfg.Mode), nil
	}
	logger := klog.FromContext(ctx)
	for logged := false; ; {
		if nriplugin.Answers(ctx, cfg.NRI.SocketPath) {
			return ModeNRI, "the runtime's NRI socket " + cfg.NRI.SocketPath + " answers", nil
		}
		endpoint, err := cri.Endpoint(ctx, cfg.CNI.CRISocket)
		if err == nil {
			deadline := time.Now().Add(nriGrace)
			for time.Now().Before(deadline) {
				if nriplugin.Answers(ctx, cfg.NRI.SocketPath) {
					return ModeNRI, "the runtime's NRI socket " + cfg.NRI.SocketPath + " answers", nil
				}
				if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
					return "", "", err
				}
			}
			return ModeCNI, fmt.Sprintf("the runtime answers on its CRI socket %s but not on the NRI socket %s (NRI disabled or not supported)", endpoint, cfg.NRI.SocketPath), nil
		}
		if !logged {
			logger.Info("Waiting for the container runtime to pick a mode: neither its NRI nor its CRI socket answers", "nriSocket", cfg.NRI.SocketPath, "cri", err)
			logged = true
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return "", "", err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// nriSource is NRI mode: the plugin, and the listings of the runtime's
// pods for the removals it does not send the plugin.
//
// NRI tells a plugin of a pod's stop and removal, but containerd (2.4.2
// and the 2.x before it) decides whether to send them from state it keeps
// in memory and rebuilds, when a plugin synchronizes, for containers only:
// after containerd restarts, a pod that was running then is stopped and
// removed without StopPodSandbox or RemovePodSandbox reaching any plugin
// (internal/nri/nri.go, needsStopping and syncPlugin). Without the
// listings such a pod's ztunnel entry, checkpoint record and namespace
// descriptors would outlive it.
type nriSource struct {
	*nriplugin.Plugin
	removals *cri.Reconciler
}

// newNRISource is NRI mode over the core: a pod missing from the
// runtime's ready sandboxes for twice --cri-resync-interval is gone (NRI
// enrolls a pod a few milliseconds before the runtime marks its sandbox
// ready).
func newNRISource(cfg Config, plugin *nriplugin.Plugin, core cri.ReconciledCore, m *metrics.Metrics) nriSource {
	removals := cri.NewReconciler(core, cri.ReconcilerConfig{Interval: cfg.CNI.ResyncInterval, Grace: 2 * cfg.CNI.ResyncInterval,
		Unheard: "its stop and removal", Missed: m.MissedRemovals,
		Dial:  func(ctx context.Context) (cri.Listing, error) { return cri.DialEndpoint(ctx, cfg.CNI.CRISocket) },
		Check: cri.SameRuntime(func() string { name, _ := plugin.Runtime(); return name })})
	return nriSource{Plugin: plugin, removals: removals}
}

func (s nriSource) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { s.removals.Run(klog.NewContext(ctx, klog.FromContext(ctx).WithName("removals")), nil) })
	return s.Plugin.Run(ctx)
}

var _ podSource = nriSource{}
