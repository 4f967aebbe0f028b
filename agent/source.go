package agent

import (
	"context"
	"errors"

	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/nriplugin"
)

// podSource is how new pods reach the core: the NRI plugin, or CNI mode.
type podSource interface {
	Run(ctx context.Context) error
	// Connected is true while new pods are enrolled before they start.
	Connected() bool
}

var (
	_ podSource = (*nriplugin.Plugin)(nil)
	_ podSource = (*cnifallback.Fallback)(nil)
)

// modeSource picks the node's pod source once the runtime answers (see
// selectMode) and then runs it. Picking happens inside Run, so that a
// meshlet started before the runtime serves ztunnel, the API watchers and
// its health endpoints meanwhile, and reports why it is not ready.
type modeSource struct {
	cfg Config
	// build makes the source for the mode picked; ctx is the source's
	// lifetime.
	build  func(context.Context, Mode) (podSource, error)
	onPick func(Mode)
	picked atomic.Pointer[pickedSource]
}

type pickedSource struct {
	mode   Mode
	source podSource
}

func (s *modeSource) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	mode, why, err := selectMode(ctx, s.cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if mode == ModeCNI && s.cfg.Standalone {
		return errStandaloneCNI
	}
	src, err := s.build(ctx, mode)
	if err != nil {
		return err
	}
	logger.Info("Pod source selected", "mode", mode, "why", why)
	s.picked.Store(&pickedSource{mode: mode, source: src})
	s.onPick(mode)
	return src.Run(ctx)
}

func (s *modeSource) Connected() bool {
	p := s.picked.Load()
	return p != nil && p.source.Connected()
}

// notReady says why new pods are not enrolled now, or nil.
func (s *modeSource) notReady() error {
	p := s.picked.Load()
	switch {
	case p == nil:
		return errors.New("waiting for the container runtime: neither its NRI socket nor its CRI socket answers (--mode " + string(s.cfg.Mode) + ")")
	case p.source.Connected():
		return nil
	case p.mode == ModeCNI:
		return errors.New("CNI mode: meshlet-cni is not chained in the runtime's CNI configuration, or the running pods are not synchronized yet")
	}
	return errors.New("not connected to the container runtime (NRI)")
}

// cniMode is whether CNI mode was picked.
func (s *modeSource) cniMode() bool {
	p := s.picked.Load()
	return p != nil && p.mode == ModeCNI
}

// current names the pod source in use, or says that it is being chosen.
func (s *modeSource) current() string {
	if p := s.picked.Load(); p != nil {
		return string(p.mode)
	}
	return "choosing (--mode " + string(s.cfg.Mode) + ")"
}
