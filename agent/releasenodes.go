package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/meshlet/meshlet/agent/kube"
)

// releaseWait is how long meshlet release-nodes waits for the nodes'
// meshlets to take their taints off before it takes off what is left.
const releaseWait = 30 * time.Second

// ReleaseNodes is meshlet release-nodes: cfg's node taint and condition
// taken off every node before the DaemonSet ds (NAMESPACE/NAME) is deleted
// (kube.ReleaseNodes).
func ReleaseNodes(ctx context.Context, cfg Config, ds string) error {
	ref, err := kube.ParseObjectRef(ds)
	if err != nil {
		return fmt.Errorf("DaemonSet %q: %w", ds, err)
	}
	if err := cfg.validateNodeReadiness(); err != nil {
		return err
	}
	rc, err := kube.RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kube.NewClient(rc)
	if err != nil {
		return err
	}
	return kube.ReleaseNodes(ctx, client, ref, cfg.NodeTaint, cfg.NodeCondition, releaseWait)
}
