package nriplugin

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/klog/v2"
)

// runningSandboxes returns the sandbox that runs of each pod in a
// runtime's listing, which may also hold stopped ones: containerd lists
// NotReady sandboxes, and after the kubelet re-creates a pod's sandbox the
// old one is listed next to the new until the kubelet's garbage collection
// removes it. Both share the pod's UID.
//
// A sandbox is stopped when its pause process is gone (pid 0) and so is
// its network namespace (none named, or the path no longer exists):
// containerd drops a torn-down namespace from the listing, CRI-O names the
// unmounted path. A pid of 0 alone says nothing on CRI-O, which runs
// without a pause process. Of several sandboxes of one pod left, one with
// a pause process wins, then the one the core has the pod in (current),
// then the last listed. The others are logged.
func runningSandboxes(ctx context.Context, sandboxes []*api.PodSandbox, current func(uid string) string) []*api.PodSandbox {
	logger := klog.FromContext(ctx)
	at := make(map[string]int, len(sandboxes))
	out := make([]*api.PodSandbox, 0, len(sandboxes))
	for _, sb := range sandboxes {
		if stopped(sb) {
			logger.V(2).Info("Ignoring a stopped sandbox in the runtime's listing", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()),
				"podUID", sb.GetUid(), "sandbox", sb.GetId())
			continue
		}
		i, dup := at[sb.GetUid()]
		if !dup {
			at[sb.GetUid()] = len(out)
			out = append(out, sb)
			continue
		}
		keep, drop := sb, out[i]
		switch {
		case (drop.GetPid() != 0) != (sb.GetPid() != 0):
			if drop.GetPid() != 0 {
				keep, drop = drop, sb
			}
		case drop.GetId() == current(sb.GetUid()):
			keep, drop = drop, sb
		}
		out[i] = keep
		logger.Info("The runtime lists two sandboxes of one pod: enrolling the one that runs", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()),
			"podUID", sb.GetUid(), "sandbox", keep.GetId(), "ignored", drop.GetId())
	}
	return out
}

// stopped reports whether the sandbox's pause process and network
// namespace are both gone (see runningSandboxes).
func stopped(sb *api.PodSandbox) bool {
	if sb.GetPid() != 0 {
		return false
	}
	path := netnsPath(sb)
	if path == "" {
		return true
	}
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// netnsPath is the sandbox's network namespace path, "" if none is named.
func netnsPath(sb *api.PodSandbox) string {
	for _, ns := range sb.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	return ""
}
