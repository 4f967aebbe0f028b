package agent

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/state"
)

// checkpointInterval is how often the checkpoint is compared with the
// core's state and rewritten if it changed. Writes never happen inside a
// runtime hook.
const checkpointInterval = 2 * time.Second

// loadAdoptions reads the checkpoint and turns it into adoptions for the
// redirector. A corrupt checkpoint is set aside loudly and ignored: every
// running pod is then re-applied from scratch, which is always correct.
func loadAdoptions(dir string, logger klog.Logger) []redirect.Adoption {
	cp, err := state.Load(dir)
	if errors.Is(err, state.ErrCorrupt) {
		moved, merr := state.SetAside(dir)
		logger.Error(err, "Ignoring the checkpoint: every running pod's rules will be rewritten", "setAside", moved, "setAsideErr", merr)
		return nil
	}
	if err != nil {
		logger.Error(err, "Ignoring the checkpoint")
		return nil
	}
	out := make([]redirect.Adoption, 0, len(cp.Pods))
	for _, p := range cp.Pods {
		out = append(out, redirect.Adoption{UID: p.UID, NetnsInode: p.NetnsInode, IPs: p.IPs,
			Options: enroll.Options{DNSCapture: p.DNSCapture, BypassInbound: p.BypassInbound, IPv6: p.IPv6}})
	}
	logger.Info("Checkpoint loaded", "dir", dir, "pods", len(out))
	return out
}

func checkpointOf(ws []enroll.Workload) state.Checkpoint {
	cp := state.Checkpoint{Version: state.Version, Pods: make([]state.Pod, 0, len(ws))}
	for _, w := range ws {
		cp.Pods = append(cp.Pods, state.Pod{UID: w.UID, Name: w.Name, Namespace: w.Namespace,
			ServiceAccount: w.ServiceAccount, NetnsInode: w.Netns.Inode(), IPs: slices.Clone(w.IPs),
			DNSCapture: w.Options.DNSCapture, BypassInbound: w.Options.BypassInbound, IPv6: w.Options.IPv6})
	}
	slices.SortFunc(cp.Pods, state.ByUID)
	return cp
}

func sameCheckpoint(a, b state.Checkpoint) bool {
	return slices.EqualFunc(a.Pods, b.Pods, func(x, y state.Pod) bool {
		return x.UID == y.UID && x.Name == y.Name && x.Namespace == y.Namespace && x.ServiceAccount == y.ServiceAccount &&
			x.NetnsInode == y.NetnsInode && slices.Equal(x.IPs, y.IPs) && x.DNSCapture == y.DNSCapture &&
			x.BypassInbound == y.BypassInbound && x.IPv6 == y.IPv6
	})
}

// runCheckpointer writes the core's enrolled pods to the state dir when
// they change, and once more on the way out.
func runCheckpointer(ctx context.Context, dir string, core *enroll.Core) {
	logger := klog.FromContext(ctx)
	var last state.Checkpoint
	written := false
	write := func() {
		cp := checkpointOf(core.Workloads())
		if written && sameCheckpoint(cp, last) {
			return
		}
		if err := state.Save(dir, cp); err != nil {
			logger.Error(err, "Writing the checkpoint")
			return
		}
		last, written = cp, true
	}
	tick := time.NewTicker(checkpointInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			write()
			return
		case <-tick.C:
			write()
		}
	}
}
