package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/redirect"
)

// standbyInterval is how often a meshlet waiting on the node lock checks
// again that it could take the node over.
const standbyInterval = 5 * time.Second

// canTakeOver says, changing nothing, whether this meshlet could serve the
// node once it holds the node lock: the runtime answers, the redirect
// backend runs here, and (with an API server and --pod-name) the lock's
// holder is the previous pod of meshlet's own DaemonSet, which the update
// will stop. In a surge update the DaemonSet controller stops the old pod
// once the new one is Ready and then moves on to the next node, so this
// is all that stands between a release that cannot serve and every node.
func canTakeOver(ctx context.Context, cfg Config, client kubernetes.Interface) error {
	if err := runtimeAnswers(ctx, cfg); err != nil {
		return err
	}
	if err := redirect.Check(cfg.Redirect); err != nil {
		return fmt.Errorf("redirect backend %s: %w", cfg.Redirect.Backend, err)
	}
	if client == nil || cfg.PodName == "" {
		return nil
	}
	previous, err := kube.SiblingOnNode(ctx, client, cfg.PodNamespace, cfg.PodName, cfg.NodeName)
	switch {
	case err != nil:
		return fmt.Errorf("API server: %w", err)
	case previous == "":
		return errors.New("the node lock is held, but no other pod of meshlet's DaemonSet runs on this node: nothing will hand the node over")
	}
	return nil
}

// runtimeAnswers is whether the runtime answers where --mode will look.
func runtimeAnswers(ctx context.Context, cfg Config) error {
	nri := func() error {
		if !nriAnswers(ctx, cfg.NRI.SocketPath) {
			return fmt.Errorf("the runtime's NRI socket %s does not answer", cfg.NRI.SocketPath)
		}
		return nil
	}
	cri := func() error {
		if _, err := criEndpoint(ctx, cfg); err != nil {
			return fmt.Errorf("the runtime's CRI socket: %w", err)
		}
		return nil
	}
	switch cfg.Mode {
	case ModeNRI:
		return nri()
	case ModeCNI:
		return cri()
	}
	if err := nri(); err != nil {
		if criErr := cri(); criErr != nil {
			return errors.Join(err, criErr)
		}
	}
	return nil
}

// watchTakeover checks every standbyInterval, until ctx ends, whether this
// standby could take over (check), publishing the answer for /readyz and
// logging each change.
func (r *readiness) watchTakeover(ctx context.Context, check func(context.Context) error) {
	logger := klog.FromContext(ctx)
	var last *takeoverResult
	for {
		res := &takeoverResult{err: check(ctx)}
		if ctx.Err() != nil {
			return // the lock was taken meanwhile: the answer is moot
		}
		r.takeover.Store(res)
		switch {
		case res.err == nil && (last == nil || last.err != nil):
			logger.Info("Standby: ready to take the node over when the meshlet serving it exits")
		case res.err != nil && (last == nil || last.err == nil || last.err.Error() != res.err.Error()):
			logger.Info("Standby: cannot take the node over; not ready", "reason", res.err)
		}
		last = res
		select {
		case <-ctx.Done():
			return
		case <-time.After(standbyInterval):
		}
	}
}

// takeoverResult is one answer of canTakeOver.
type takeoverResult struct{ err error }
