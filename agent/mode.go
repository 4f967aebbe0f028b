package agent

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
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
