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
// A nil list with an error: the runtime could not be read and the daemon
// must not reconcile (the list would be incomplete). A non-nil list with
// an error: the error names the ready sandboxes left out because they
// cannot be enrolled; the list is otherwise complete. See the package
// documentation.
func (l *Lister) RunningPods(ctx context.Context) ([]enroll.Pod, error) {
	logger := klog.FromContext(ctx)
	resp, err := l.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes from %s: %w", l.endpoint, err)
	}
	pods := make([]enroll.Pod, 0, len(resp.GetItems()))
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
			return nil, fmt.Errorf("pod sandbox status %s (pod %s): %w", id, podRef(sb.GetMetadata()), err)
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
			skipped = append(skipped, fmt.Errorf("pod sandbox %s (pod %s): %w", id, podRef(st.GetStatus().GetMetadata()), err))
			continue
		}
		pods = append(pods, pod)
	}
	if len(skipped) > 0 {
		return pods, fmt.Errorf("%d running pod sandbox(es) cannot be enrolled: %w", len(skipped), errors.Join(skipped...))
	}
	return pods, nil
}

func podRef(md *runtimeapi.PodSandboxMetadata) string {
	return md.GetNamespace() + "/" + md.GetName()
}
