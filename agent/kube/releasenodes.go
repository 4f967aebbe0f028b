package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// UninstallingAnnotation on meshlet's DaemonSet, set to the time (RFC
// 3339), tells its meshlets that it is about to be deleted (ReleaseNodes
// sets it): each takes its node's taint and condition off at once, while
// its RBAC still lets it.
const UninstallingAnnotation = "meshlet.dev/uninstalling"

// ReleaseNodes takes meshlet's taint (taintKey) and condition
// (conditionType) off every node before meshlet's DaemonSet ds and its
// RBAC are deleted (the chart's pre-delete hook). An uninstall deletes
// both together, and a meshlet that stops after its role binding went
// cannot remove its taint, which would then keep every new pod off its
// node. It annotates the DaemonSet (UninstallingAnnotation), waits at most
// wait for the meshlets to take theirs off, then takes off what is left:
// nodes whose meshlet is not running.
func ReleaseNodes(ctx context.Context, client kubernetes.Interface, ds ObjectRef, taintKey, conditionType string, wait time.Duration) error {
	logger := klog.FromContext(ctx)
	if taintKey == "" && conditionType == "" {
		return errors.New("nothing to release: give --node-taint or --node-condition")
	}
	// The time: an uninstall that fails leaves the annotation behind, and
	// the meshlets go on as before once it is old (DaemonSetWatch).
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, UninstallingAnnotation, time.Now().UTC().Format(time.RFC3339))
	_, err := client.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "meshlet"})
	switch {
	case apierrors.IsNotFound(err):
		logger.Info("meshlet's DaemonSet is gone: releasing the nodes it left", "daemonSet", ds)
		wait = 0
	case err != nil:
		return fmt.Errorf("annotate DaemonSet %s: %w", ds, err)
	}
	deadline := time.Now().Add(wait)
	for {
		held, err := heldNodes(ctx, client, taintKey, conditionType)
		if err != nil {
			return err
		}
		if len(held) == 0 {
			logger.Info("No node keeps meshlet's taint or condition", "taint", taintKey, "condition", conditionType)
			return nil
		}
		if time.Now().After(deadline) {
			logger.Info("Taking meshlet's taint and condition off the nodes whose meshlet did not", "nodes", held, "taint", taintKey, "condition", conditionType)
			var errs []error
			for _, node := range held {
				nr := &NodeReadiness{client: client, cfg: NodeReadinessConfig{Node: node, TaintKey: taintKey, ConditionType: conditionType}}
				errs = append(errs, nr.Remove(ctx))
			}
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// heldNodes are the nodes that carry the taint or the condition.
func heldNodes(ctx context.Context, client kubernetes.Interface, taintKey, conditionType string) ([]string, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var held []string
	for _, n := range list.Items {
		tainted := taintKey != "" && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taintKey })
		if tainted || (conditionType != "" && condition(&n, conditionType) != nil) {
			held = append(held, n.Name)
		}
	}
	return held, nil
}
