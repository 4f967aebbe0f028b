package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/meshready"
)

// NodeReadinessConfig says where a node's mesh readiness is published for
// the scheduler: its own taint, or a condition the Node Readiness
// Controller turns into one. At least one is set.
type NodeReadinessConfig struct {
	// Node is the node's name.
	Node string
	// TaintKey, if set, is a NoSchedule taint on the node while its mesh
	// cannot take new pods (its value the reason), removed once it can.
	TaintKey string
	// ConditionType, if set, is a node condition, True while the mesh
	// can take new pods and False (its reason why) while it cannot.
	ConditionType string
}

// NodeReadiness keeps the node's taint or condition in line with its
// mesh's state: level-triggered, so that a taint someone removed (or the
// kubelet's --register-with-taints) is put right at the next look.
type NodeReadiness struct {
	client kubernetes.Interface
	cfg    NodeReadinessConfig
	node   cache.SharedIndexInformer

	mu sync.Mutex
	// published is the state last written and found in the API (nil:
	// none yet); err the last write's error.
	published *meshready.State
	err       error
}

// nodeReadinessPoll bounds how long a change of the mesh's state takes to be
// written.
const nodeReadinessPoll = 100 * time.Millisecond

// nodeSyncWait is how long the node's informer may take to list it before
// meshlet says it cannot publish.
const nodeSyncWait = 10 * time.Second

// NewNodeReadiness returns the publisher for cfg; Run starts it.
func NewNodeReadiness(client kubernetes.Interface, cfg NodeReadinessConfig) *NodeReadiness {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.Node).String()
	}))
	inf := f.Core().V1().Nodes().Informer()
	// Only the taints and conditions are read: the node's image list and
	// managed fields are most of its size.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			n.ManagedFields = nil
			n.Status.Images = nil
		}
		return obj, nil
	})
	return &NodeReadiness{client: client, cfg: cfg, node: inf}
}

// Run publishes state() until ctx ends. Then, if successorKeeps says the
// meshlet that follows on the node keeps this taint (or condition), it
// marks the node's mesh not ready (meshlet-stopped: no new pod can be
// enrolled until a meshlet serves the node again), waiting at most a
// second for the API server. Whenever successorKeeps says no (meshlet's
// DaemonSet deleted, or updated to another key or to none), it takes them
// off at once, as no meshlet would ever remove them, and keeps them off:
// at once, because the same uninstall or update takes away the RBAC rule
// that lets it.
func (n *NodeReadiness) Run(ctx context.Context, state func() meshready.State, successorKeeps func() bool) {
	logger := klog.FromContext(ctx).WithValues("node", n.cfg.Node, "taint", n.cfg.TaintKey, "condition", n.cfg.ConditionType)
	changed := make(chan struct{}, 1)
	wake := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, _ = n.node.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake() },
		UpdateFunc: func(any, any) { wake() },
		DeleteFunc: func(any) { wake() },
	})
	go n.node.RunWithContext(ctx)
	tick := time.NewTicker(nodeReadinessPoll)
	defer tick.Stop()
	var (
		retryAt   time.Time
		written   *meshready.State // the last state written, at writtenAt
		writtenAt time.Time
		logged    *meshready.State // the last state logged
		handedOff bool             // taken off: no successor keeps them
		removeErr string           // the last failed removal's error
	)
	started, toldUnsynced := time.Now(), false
	for {
		select {
		case <-ctx.Done():
			if !handedOff {
				n.stop(context.WithoutCancel(ctx), logger, successorKeeps())
			}
			return
		case <-tick.C:
		case <-changed:
		}
		if !successorKeeps() {
			if !handedOff && time.Now().After(retryAt) {
				if err := n.Remove(ctx); err != nil {
					// A renamed key's new policy may refuse it for good:
					// said once, tried every ten seconds.
					retryAt = time.Now().Add(10 * time.Second)
					if removeErr == "" || removeErr != err.Error() {
						logger.Error(err, "Taking the node's mesh taint or condition off: the next meshlet does not keep them; retrying every 10s")
						removeErr = err.Error()
					}
					continue
				}
				logger.Info("Node's mesh taint and condition taken off: meshlet's DaemonSet is deleted, or no longer sets them")
				handedOff, written, logged = true, nil, nil
			}
			continue
		}
		handedOff = false
		if !n.node.HasSynced() {
			if !toldUnsynced && time.Since(started) > nodeSyncWait {
				// The informer retries on its own; say why nothing is
				// written meanwhile.
				n.record(nil, fmt.Errorf("node %s not listed from the API server after %v (meshlet's ClusterRole needs nodes get, list and watch)", n.cfg.Node, nodeSyncWait))
				_, _, err := n.Published()
				logger.Error(err, "Cannot publish the node's mesh readiness yet")
				toldUnsynced = true
			}
			continue
		}
		want := state()
		switch {
		case n.inPlace(want):
			n.record(&want, nil)
		case written != nil && *written == want && time.Since(writtenAt) < cacheLag:
			// Written: the node's informer has not shown it yet.
			continue
		case time.Now().Before(retryAt):
			continue
		default:
			_, _, prevErr := n.Published()
			if err := n.publish(ctx, want); err != nil {
				if ctx.Err() != nil {
					continue
				}
				retryAt = time.Now().Add(time.Second)
				if prevErr == nil || prevErr.Error() != err.Error() {
					logger.Error(err, "Publishing the node's mesh readiness; retrying every second")
				}
				continue
			}
			written, writtenAt = &want, time.Now()
		}
		if logged != nil && *logged == want {
			continue
		}
		if want.Ready {
			logger.Info("Node's mesh ready: new mesh pods may be scheduled here")
		} else {
			logger.Info("Node's mesh not ready: no new mesh pod is scheduled here", "reason", want.Reason, "detail", want.Message)
		}
		logged = &want
	}
}

// cacheLag is how long a state written is taken as in place while the
// node's informer does not show it yet; after that, a node that still
// does not show it (someone changed it back) is written again.
const cacheLag = 2 * time.Second

// stop marks the node's mesh not ready when the next meshlet keeps the
// taint (or condition), and takes them off when it does not.
func (n *NodeReadiness) stop(ctx context.Context, logger klog.Logger, successorKeeps bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if !successorKeeps {
		if err := n.Remove(ctx); err != nil {
			logger.Error(err, "Taking the node's mesh taint or condition off on stop (the next meshlet does not keep it)")
			return
		}
		logger.Info("Node's mesh taint and condition removed: the next meshlet on the node does not keep them")
		return
	}
	if err := n.publish(ctx, meshready.Stopped); err != nil {
		logger.Error(err, "Marking the node's mesh not ready on stop")
		return
	}
	logger.Info("Node's mesh marked not ready: meshlet is stopping")
}

// record sets what Published reports.
func (n *NodeReadiness) record(published *meshready.State, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if published != nil {
		n.published = published
	}
	n.err = err
}

// Published is the state last written to the node (false: none yet), and
// the last write's error.
func (n *NodeReadiness) Published() (meshready.State, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.published == nil {
		return meshready.State{}, false, n.err
	}
	return *n.published, true, n.err
}

// inPlace reports whether the node, as last seen, shows want.
func (n *NodeReadiness) inPlace(want meshready.State) bool {
	obj, ok, err := n.node.GetStore().GetByKey(n.cfg.Node)
	if err != nil || !ok {
		return false
	}
	node := obj.(*corev1.Node)
	if n.cfg.TaintKey != "" {
		if _, changed := withMeshTaint(node.Spec.Taints, n.cfg.TaintKey, want); changed {
			return false
		}
	}
	if n.cfg.ConditionType != "" {
		c := condition(node, n.cfg.ConditionType)
		if c == nil || c.Status != conditionStatus(want) || c.Reason != conditionReason(want) {
			return false
		}
	}
	return true
}

// publish writes want to the node: the taint with a merge patch
// conditional on the node's version (taints are one list: the patch
// replaces it whole, so it must not undo a write it did not see), the
// condition with a strategic merge patch, merged by its type. A failed
// write is recorded for Published.
func (n *NodeReadiness) publish(ctx context.Context, want meshready.State) error {
	if n.cfg.TaintKey != "" {
		if err := n.setTaint(ctx, want); err != nil {
			n.record(nil, err)
			return err
		}
	}
	if n.cfg.ConditionType != "" {
		if err := n.setCondition(ctx, want); err != nil {
			n.record(nil, err)
			return err
		}
	}
	n.record(&want, nil)
	return nil
}

func (n *NodeReadiness) setTaint(ctx context.Context, want meshready.State) error {
	nodes := n.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, n.cfg.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints, changed := withMeshTaint(node.Spec.Taints, n.cfg.TaintKey, want)
		if !changed {
			return nil
		}
		// The resourceVersion makes the patch conditional: Conflict when
		// the node changed since the Get.
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return fmt.Errorf("encode the taints: %w", err)
		}
		_, err = nodes.Patch(ctx, n.cfg.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "meshlet"})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s taint %s: %w", n.cfg.Node, n.cfg.TaintKey, explainForbidden(err))
	}
	return nil
}

// withMeshTaint is taints with key:NoSchedule (value: the reason) when the
// mesh is not ready and without it when it is, and whether that differs.
// Other taints, and their order, are kept.
func withMeshTaint(taints []corev1.Taint, key string, want meshready.State) ([]corev1.Taint, bool) {
	var out []corev1.Taint
	found := false
	for _, t := range taints {
		if t.Key != key {
			out = append(out, t)
			continue
		}
		if !want.Ready && !found && t.Effect == corev1.TaintEffectNoSchedule && t.Value == want.Reason {
			out = append(out, t)
			found = true
		}
	}
	if !want.Ready && !found {
		out = append(out, corev1.Taint{Key: key, Value: want.Reason, Effect: corev1.TaintEffectNoSchedule})
	}
	return out, !slices.Equal(out, taints)
}

func (n *NodeReadiness) setCondition(ctx context.Context, want meshready.State) error {
	now := metav1.Now()
	c := corev1.NodeCondition{Type: corev1.NodeConditionType(n.cfg.ConditionType), Status: conditionStatus(want),
		Reason: conditionReason(want), Message: conditionMessage(want), LastHeartbeatTime: now, LastTransitionTime: now}
	if obj, ok, _ := n.node.GetStore().GetByKey(n.cfg.Node); ok {
		if old := condition(obj.(*corev1.Node), n.cfg.ConditionType); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		return fmt.Errorf("encode the condition: %w", err)
	}
	_, err = n.client.CoreV1().Nodes().PatchStatus(ctx, n.cfg.Node, patch)
	if err != nil {
		return fmt.Errorf("node %s condition %s: %w", n.cfg.Node, n.cfg.ConditionType, explainForbidden(err))
	}
	return nil
}

// Remove takes the taint and the condition off the node: meshlet is
// uninstalled from it, and no meshlet will say it is ready again.
func (n *NodeReadiness) Remove(ctx context.Context) error {
	var errs []error
	if n.cfg.TaintKey != "" {
		errs = append(errs, n.setTaint(ctx, meshready.State{Ready: true}))
	}
	if n.cfg.ConditionType != "" {
		errs = append(errs, n.removeCondition(ctx))
	}
	return errors.Join(errs...)
}

// removeCondition deletes the condition with a JSON patch naming its index,
// tested first (conditions merge by type, and a merge patch cannot delete
// one); a test that fails (the conditions moved) is tried again.
func (n *NodeReadiness) removeCondition(ctx context.Context) error {
	var err error
	for range 3 {
		var node *corev1.Node
		if node, err = n.client.CoreV1().Nodes().Get(ctx, n.cfg.Node, metav1.GetOptions{}); err != nil {
			break
		}
		i := slices.IndexFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return string(c.Type) == n.cfg.ConditionType })
		if i < 0 {
			return nil
		}
		patch := fmt.Sprintf(`[{"op":"test","path":"/status/conditions/%d/type","value":%q},{"op":"remove","path":"/status/conditions/%d"}]`, i, n.cfg.ConditionType, i)
		_, err = n.client.CoreV1().Nodes().Patch(ctx, n.cfg.Node, types.JSONPatchType, []byte(patch), metav1.PatchOptions{FieldManager: "meshlet"}, "status")
		if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("node %s condition %s: %w", n.cfg.Node, n.cfg.ConditionType, explainForbidden(err))
	}
	return nil
}

func condition(node *corev1.Node, typ string) *corev1.NodeCondition {
	for i, c := range node.Status.Conditions {
		if string(c.Type) == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func conditionStatus(s meshready.State) corev1.ConditionStatus {
	if s.Ready {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

// conditionReason is the reason in a condition's CamelCase:
// ztunnel-disconnected is ZtunnelDisconnected.
func conditionReason(s meshready.State) string {
	if s.Ready {
		return "MeshReady"
	}
	var b strings.Builder
	for _, w := range strings.Split(s.Reason, "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

func conditionMessage(s meshready.State) string {
	if s.Ready {
		return "meshlet's runtime hook is in place and ztunnel is connected: the node enrolls new mesh pods"
	}
	return s.Message
}

// explainForbidden adds to a refusal what usually causes it.
func explainForbidden(err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w (meshlet's ClusterRole needs nodes patch, or nodes/status patch for a condition, and the chart's admission policy lets a meshlet change only its own node's taint and condition)", err)
	}
	return err
}
