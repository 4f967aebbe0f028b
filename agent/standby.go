package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/nriplugin"
)

// canTakeOver says, changing nothing, whether this meshlet could serve the
// node once it holds the node lock: the runtime answers (its NRI socket
// dialled only while dial: each connection that does not register as a
// plugin costs the runtime an error in its log, so once it has answered,
// later checks see the socket is there), the redirect backend runs here,
// and (with an API server and --pod-name) another running pod of
// meshlet's own DaemonSet is on the node: the pod the update replaces,
// which will exit. In a surge update the DaemonSet controller stops the
// old pod once the new one is Ready and then moves on to the next node,
// so this is all that stands between a release that cannot serve and
// every node.
func canTakeOver(ctx context.Context, cfg Config, client kubernetes.Interface, dial bool) error {
	if err := runtimeAnswers(ctx, cfg, dial); err != nil {
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

// runtimeAnswers is whether the runtime answers where --mode will look;
// unless dial, the NRI socket only has to be there.
func runtimeAnswers(ctx context.Context, cfg Config, dial bool) error {
	nri := func() error {
		if !dial {
			if fi, err := os.Stat(cfg.NRI.SocketPath); err != nil || fi.Mode().Type() != fs.ModeSocket {
				return fmt.Errorf("the runtime's NRI socket %s is gone", cfg.NRI.SocketPath)
			}
			return nil
		}
		if !nriplugin.Answers(ctx, cfg.NRI.SocketPath) {
			return fmt.Errorf("the runtime's NRI socket %s does not answer", cfg.NRI.SocketPath)
		}
		return nil
	}
	cri := func() error {
		if _, err := cri.Endpoint(ctx, cfg.CNI.CRISocket); err != nil {
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

// standbyChecks returns what state.AcquireNodeLock calls once it waits on
// another meshlet: checks, in the background until ctx ends, of whether
// this one could take the node over.
func standbyChecks(ctx context.Context, r *health.Readiness, cfg Config, client kubernetes.Interface) func() {
	return func() {
		dial := true // until the runtime has answered once
		go r.WatchTakeover(ctx, func(ctx context.Context) error {
			err := canTakeOver(ctx, cfg, client, dial)
			dial = dial && err != nil
			return err
		})
	}
}
