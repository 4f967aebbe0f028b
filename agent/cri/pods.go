package cri

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// RunningPods returns the pods of the node's ready sandboxes, for the
// core's Reconcile. ctx bounds every call to the runtime.
//
// A nil list and an error: the runtime could not be listed, and the daemon
// must not reconcile. Otherwise the list (possibly empty, never nil) holds
// every ready sandbox except those in unreadable: the UIDs of ready
// sandboxes whose status could not be read or cannot be enrolled (no
// network namespace path reported for a pod network); err then names
// them. Those pods are running: the daemon must not take them for gone.
// See the package documentation.
func (l *Lister) RunningPods(ctx context.Context) (pods []enroll.Pod, unreadable []string, err error) {
	logger := klog.FromContext(ctx)
	resp, err := l.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list pod sandboxes from %s: %w", l.endpoint, err)
	}
	pods = make([]enroll.Pod, 0, len(resp.GetItems()))
	var skipped []error
	for _, sb := range resp.GetItems() {
		// The filter is the runtime's; a sandbox it let through that is
		// not ready must still not be listed.
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		id := sb.GetId()
		st, err := l.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		if status.Code(err) == codes.NotFound {
			logger.V(4).Info("Pod sandbox removed while listing", "podSandboxID", id)
			continue
		}
		if err != nil {
			unreadable = append(unreadable, sb.GetMetadata().GetUid())
			skipped = append(skipped, fmt.Errorf("pod sandbox status %s (pod %s): %w", id, podRef(sb.GetMetadata()), err))
			continue
		}
		// Stopped between the list and the status.
		if st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		pod, bad, err := podFromStatus(st.GetStatus(), st.GetInfo())
		if len(bad) > 0 {
			logger.Info("Ignoring unparsable pod IPs", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", id, "ips", bad)
		}
		if err != nil {
			unreadable = append(unreadable, sb.GetMetadata().GetUid())
			skipped = append(skipped, fmt.Errorf("pod sandbox %s (pod %s): %w", id, podRef(st.GetStatus().GetMetadata()), err))
			continue
		}
		pods = append(pods, pod)
	}
	if len(skipped) > 0 {
		return pods, unreadable, fmt.Errorf("%d running pod sandbox(es) cannot be read or enrolled: %w", len(skipped), errors.Join(skipped...))
	}
	return pods, nil, nil
}

func podRef(md *runtimeapi.PodSandboxMetadata) string {
	return md.GetNamespace() + "/" + md.GetName()
}
