package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/meshready"
	"github.com/meshlet/meshlet/internal/helmchart"
)

// The node readiness facts deploy/rbac.yaml and nodereadiness.yaml are
// rendered with (nodeReadiness.mode=taint).
const (
	nodeTaint = "mesh.meshlet.dev/not-ready"
	nodesVAP  = "meshlet-nodes"
)

// meshState is a mesh state a test sets.
type meshState struct {
	mu sync.Mutex
	s  meshready.State
	// notKept: the meshlet that follows does not keep the taint.
	notKept atomic.Bool
}

func (m *meshState) set(s meshready.State) { m.mu.Lock(); m.s = s; m.mu.Unlock() }
func (m *meshState) get() meshready.State  { m.mu.Lock(); defer m.mu.Unlock(); return m.s }

var ztunnelGone = meshready.State{Reason: meshready.ReasonZtunnel, Message: "no ztunnel"}

// runNodeReadiness runs the publisher as rc until the returned stop is
// called (or the test ends), which waits for it to return. The meshlet
// that follows keeps the taint (or condition) unless m says otherwise.
func runNodeReadiness(t *testing.T, rc kubernetes.Interface, cfg kube.NodeReadinessConfig, m *meshState) (*kube.NodeReadiness, func()) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	nr := kube.NewNodeReadiness(rc, cfg)
	done := make(chan struct{})
	go func() { defer close(done); nr.Run(ctx, m.get, func() bool { return !m.notKept.Load() }) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return nr, stop
}

// meshTaints are the node's taints of key.
func meshTaints(t *testing.T, c kubernetes.Interface, node, key string) []corev1.Taint {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	must(t, err)
	var out []corev1.Taint
	for _, tn := range n.Spec.Taints {
		if tn.Key == key {
			out = append(out, tn)
		}
	}
	return out
}

// waitTaint waits until the node has exactly the taint key=value:NoSchedule
// (value "": none of key).
func waitTaint(t *testing.T, c kubernetes.Interface, node, key, value string) {
	t.Helper()
	eventually(t, fmt.Sprintf("node %s taint %s=%q", node, key, value), func() bool {
		got := meshTaints(t, c, node, key)
		if value == "" {
			return len(got) == 0
		}
		return len(got) == 1 && got[0].Value == value && got[0].Effect == corev1.TaintEffectNoSchedule
	})
}

// TestNodeReadinessTaint: meshlet, as its node's own service account under
// deploy/rbac.yaml's role and policy, keeps the taint on its node while the
// mesh is not ready and only then: it follows the state, puts back a taint
// someone removed, keeps every other taint, leaves it (meshlet-stopped) on
// stop and removes it on an uninstall.
func TestNodeReadinessTaint(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	node := fmt.Sprintf("taint-%d", seq.Add(1))
	rc := meshletOn(t, c, node)
	// Another agent's taint, and the kubelet's --register-with-taints.
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	other := corev1.Taint{Key: "example.com/gpu", Value: "x", Effect: corev1.TaintEffectNoExecute}
	n.Spec.Taints = []corev1.Taint{other, {Key: nodeTaint, Effect: corev1.TaintEffectNoSchedule}}
	_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	must(t, err)

	m := &meshState{s: meshready.State{Reason: meshready.ReasonRuntime, Message: "no NRI"}}
	nr, stop := runNodeReadiness(t, rc, kube.NodeReadinessConfig{Node: node, TaintKey: nodeTaint}, m)
	waitTaint(t, c, node, nodeTaint, meshready.ReasonRuntime)
	m.set(meshready.State{Ready: true})
	waitTaint(t, c, node, nodeTaint, "")
	m.set(ztunnelGone)
	waitTaint(t, c, node, nodeTaint, meshready.ReasonZtunnel)
	// Recorded once the API server answered, which may come after the
	// watch told the test.
	eventually(t, "Published() the state written", func() bool {
		st, ok, err := nr.Published()
		return ok && err == nil && st == ztunnelGone
	})

	// Someone removes the taint while the mesh is not ready: it comes back.
	n, err = c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == nodeTaint })
	_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	must(t, err)
	waitTaint(t, c, node, nodeTaint, meshready.ReasonZtunnel)

	m.set(meshready.State{Ready: true})
	waitTaint(t, c, node, nodeTaint, "")
	stop()
	// Stopped: tainted before Run returned.
	if got := meshTaints(t, c, node, nodeTaint); len(got) != 1 || got[0].Value != meshready.ReasonStopped {
		t.Errorf("taints after stop: %+v, want %s=%s", got, nodeTaint, meshready.ReasonStopped)
	}
	// Uninstalled: gone.
	must(t, kube.NewNodeReadiness(rc, kube.NodeReadinessConfig{Node: node, TaintKey: nodeTaint}).Remove(ctx))
	n, err = c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	if !slices.Equal(n.Spec.Taints, []corev1.Taint{other}) {
		t.Errorf("taints after uninstall: %+v, want only %+v", n.Spec.Taints, other)
	}

	// A meshlet whose successor does not keep the taint (its DaemonSet
	// deleted, or updated to none or to another key) takes it off as it
	// stops, ready or not.
	m = &meshState{s: ztunnelGone}
	_, stop = runNodeReadiness(t, rc, kube.NodeReadinessConfig{Node: node, TaintKey: nodeTaint}, m)
	waitTaint(t, c, node, nodeTaint, meshready.ReasonZtunnel)
	m.notKept.Store(true)
	stop()
	if got := meshTaints(t, c, node, nodeTaint); len(got) != 0 {
		t.Errorf("taints after a stop that no meshlet follows: %+v, want none", got)
	}
}

// TestNodeReadinessCondition: with a condition (the Node Readiness
// Controller's input) instead, True while ready, False with the reason in
// CamelCase while not, its transition time kept while the status is, and
// removed on an uninstall. As an admin: deploy/rbac.yaml is rendered for
// the taint.
func TestNodeReadinessCondition(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	node := fmt.Sprintf("cond-%d", seq.Add(1))
	_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	must(t, err)
	const typ = "mesh.meshlet.dev/MeshReady"
	cond := func() *corev1.NodeCondition {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		must(t, err)
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == typ {
				return &n.Status.Conditions[i]
			}
		}
		return nil
	}
	waitCond := func(status corev1.ConditionStatus, reason string) *corev1.NodeCondition {
		t.Helper()
		var got *corev1.NodeCondition
		eventually(t, fmt.Sprintf("condition %s=%s (%s)", typ, status, reason), func() bool {
			got = cond()
			return got != nil && got.Status == status && got.Reason == reason
		})
		return got
	}
	m := &meshState{s: meshready.State{Reason: meshready.ReasonRuntime, Message: "no NRI"}}
	_, stop := runNodeReadiness(t, c, kube.NodeReadinessConfig{Node: node, ConditionType: typ}, m)
	first := waitCond(corev1.ConditionFalse, "RuntimeHookDisconnected")
	if first.Message != "no NRI" {
		t.Errorf("message %q, want the state's", first.Message)
	}
	m.set(ztunnelGone)
	second := waitCond(corev1.ConditionFalse, "ZtunnelDisconnected")
	if !second.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("lastTransitionTime moved from %v to %v without a change of status", first.LastTransitionTime, second.LastTransitionTime)
	}
	m.set(meshready.State{Ready: true})
	waitCond(corev1.ConditionTrue, "MeshReady")
	stop()
	if got := cond(); got == nil || got.Status != corev1.ConditionFalse || got.Reason != "MeshletStopped" {
		t.Errorf("condition after stop: %+v, want False MeshletStopped", got)
	}
	must(t, kube.NewNodeReadiness(c, kube.NodeReadinessConfig{Node: node, ConditionType: typ}).Remove(ctx))
	if got := cond(); got != nil {
		t.Errorf("condition after uninstall: %+v, want none", got)
	}
}

// TestRBACNodeReadiness: deploy/rbac.yaml lets a node's meshlet change its
// own node's mesh taint and nothing else of any node: a meshlet token from
// node B can neither taint nor untaint node A, nor cordon, relabel or
// change another taint of its own node.
func TestRBACNodeReadiness(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	a, b := fmt.Sprintf("rbac-a-%d", seq.Add(1)), fmt.Sprintf("rbac-b-%d", seq.Add(1))
	onA := meshletOn(t, c, a)
	onB := meshletOn(t, c, b)
	// As meshlet writes: a merge patch of the changed node's labels, spec
	// and resourceVersion.
	update := func(rc kubernetes.Interface, node string, change func(*corev1.Node), dryRun bool) error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		must(t, err)
		change(n)
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "labels": n.Labels}, "spec": n.Spec})
		must(t, err)
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = rc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, opts)
		return err
	}
	taint := func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: nodeTaint, Value: meshready.ReasonZtunnel, Effect: corev1.TaintEffectNoSchedule})
	}
	untaint := func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == nodeTaint })
	}
	// The policy is enforced once admission has loaded it and its binding.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := update(onB, a, taint, true)
		if refusedByNodesVAP(err, "may not change node '"+a+"'") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ValidatingAdmissionPolicy %s not enforced after 30s: last answer %v", nodesVAP, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its own node: taint and untaint.
	must(t, update(onA, a, taint, false))
	must(t, update(onB, b, taint, false))
	for _, tc := range []struct {
		what   string
		rc     kubernetes.Interface
		node   string
		change func(*corev1.Node)
		want   string
	}{
		{"untaint another node", onB, a, untaint, "may not change node '" + a + "'"},
		{"taint another node (already tainted)", onB, a, func(n *corev1.Node) { untaint(n); taint(n) }, "may not change node '" + a + "'"},
		{"cordon its node", onB, b, func(n *corev1.Node) { n.Spec.Unschedulable = true }, "only the taint"},
		{"another taint of its node", onB, b, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/x", Effect: corev1.TaintEffectNoExecute})
		}, "only the taint"},
		{"relabel its node", onB, b, func(n *corev1.Node) { n.Labels = map[string]string{"x": "y"} }, "labels"},
		{"with a token bound to no pod", unboundMeshlet(t), b, untaint, "not bound to a pod on a node"},
	} {
		if err := update(tc.rc, tc.node, tc.change, false); !refusedByNodesVAP(err, tc.want) {
			t.Errorf("meshlet: %s: %v, want refused by %s with %q", tc.what, err, nodesVAP, tc.want)
		}
	}
	// Updates and the status are refused by RBAC (meshlet patches the
	// taints; nodes/status only in condition mode), and nodes are not
	// meshlet's to delete.
	n, err := c.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
	must(t, err)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.9"}}
	if _, err := onB.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("update its node's status: %v, want Forbidden", err)
	}
	if _, err = onB.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("update its node: %v, want Forbidden", err)
	}
	if err := onB.CoreV1().Nodes().Delete(ctx, a, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete another node: %v, want Forbidden", err)
	}
	// The untaint of its own node, through the publisher itself.
	m := &meshState{s: meshready.State{Ready: true}}
	_, stop := runNodeReadiness(t, onB, kube.NodeReadinessConfig{Node: b, TaintKey: nodeTaint}, m)
	waitTaint(t, c, b, nodeTaint, "")
	stop()
	waitTaint(t, c, a, nodeTaint, meshready.ReasonZtunnel)
}

// refusedByNodesVAP: err is the nodes policy's refusal, containing want.
func refusedByNodesVAP(err error, want string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+nodesVAP+"'") &&
		strings.Contains(err.Error(), want)
}

// TestTolerateOutsideMesh: deploy/nodereadiness.yaml's admission policy
// gives the node taint's toleration to every pod created outside the mesh
// and to none that meshlet's label rule selects, on a real API server.
func TestTolerateOutsideMesh(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	applyManifest(t, c, "nodereadiness.yaml")
	plain := namespace(t, c, nil)
	mesh := namespace(t, c, ambient)
	optOut := map[string]string{"istio.io/dataplane-mode": "none"}
	tolerates := func(p *corev1.Pod) bool {
		return slices.ContainsFunc(p.Spec.Tolerations, func(tl corev1.Toleration) bool {
			return tl.Key == nodeTaint && tl.Operator == corev1.TolerationOpExists && tl.Effect == corev1.TaintEffectNoSchedule
		})
	}
	create := func(ns string, labels map[string]string, edit func(*corev1.PodSpec)) *corev1.Pod {
		t.Helper()
		spec := corev1.PodSpec{AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "app", Image: "meshlet.test/pause:1"}}}
		if edit != nil {
			edit(&spec)
		}
		p, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "tol-", Labels: labels}, Spec: spec},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		must(t, err)
		return p
	}
	// The policy applies once admission has loaded it and its binding.
	eventually(t, "MutatingAdmissionPolicy meshlet-tolerate-outside-mesh in effect", func() bool { return tolerates(create(plain, nil, nil)) })
	hostNetwork := func(s *corev1.PodSpec) { s.HostNetwork = true }
	for _, tc := range []struct {
		what   string
		ns     string
		labels map[string]string
		edit   func(*corev1.PodSpec)
		want   bool
	}{
		{"a pod in a namespace outside the mesh", plain, nil, nil, true},
		{"a pod in an ambient namespace", mesh, nil, nil, false},
		{"a pod labelled ambient in a plain namespace", plain, ambient, nil, false},
		{"a pod labelled none in an ambient namespace", mesh, optOut, nil, true},
		{"a host-network pod in an ambient namespace", mesh, nil, hostNetwork, true},
		{"a pod with a toleration of its own", plain, nil, func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "example.com/x", Operator: corev1.TolerationOpExists}}
		}, true},
	} {
		if got := tolerates(create(tc.ns, tc.labels, tc.edit)); got != tc.want {
			t.Errorf("%s: tolerates %s: %v, want %v", tc.what, nodeTaint, got, tc.want)
		}
	}
	// Added after the pod's own tolerations, which stay; a pod that
	// tolerates every taint is left as it is.
	p := create(plain, nil, func(s *corev1.PodSpec) {
		s.Tolerations = []corev1.Toleration{{Key: "example.com/x", Operator: corev1.TolerationOpExists}}
	})
	if p.Spec.Tolerations[0].Key != "example.com/x" {
		t.Errorf("the pod's own toleration moved or went: %+v", p.Spec.Tolerations)
	}
	all := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	p = create(plain, nil, func(s *corev1.PodSpec) { s.Tolerations = slices.Clone(all) })
	if tolerates(p) {
		t.Errorf("a pod tolerating every taint got another toleration: %+v", p.Spec.Tolerations)
	}
	// kube-system (excluded from the mesh) even when labelled.
	ks, err := c.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	must(t, err)
	if ks.Labels["istio.io/dataplane-mode"] == "" {
		serviceAccount(t, c, "kube-system", "default")
		if !tolerates(create("kube-system", ambient, nil)) {
			t.Errorf("a pod labelled ambient in kube-system got no toleration")
		}
	}
}

// TestRBACNodeCondition: the chart's RBAC and policy for
// nodeReadiness.mode=condition (rendered under their own names) let a
// node's meshlet publish and remove its own node's condition, and nothing
// else: not another node's, not another condition, not the rest of the
// status, not a taint.
func TestRBACNodeCondition(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	applyRBAC(t, c) // the namespace
	applyManifest(t, c, "charts/meshlet/testdata/"+helmchart.ConditionRBAC+".yaml")
	const typ = "mesh.meshlet.dev/MeshReady"
	vap := helmchart.ConditionRBAC + "-nodes"
	refused := func(err error, want string) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+vap+"'") && strings.Contains(err.Error(), want)
	}
	a, b := fmt.Sprintf("cond-a-%d", seq.Add(1)), fmt.Sprintf("cond-b-%d", seq.Add(1))
	serviceAccountOn(t, c, a, helmchart.ConditionRBAC) // node a, with a meshlet of its own
	onB := serviceAccountOn(t, c, b, helmchart.ConditionRBAC)
	statusPatch := func(rc kubernetes.Interface, node, patch string, dryRun bool) error {
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := rc.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), opts, "status")
		return err
	}
	ours := `{"status":{"conditions":[{"type":"` + typ + `","status":"False","reason":"ZtunnelDisconnected"}]}}`
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := statusPatch(onB, a, ours, true)
		if refused(err, "may not change node '"+a+"'") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ValidatingAdmissionPolicy %s not enforced after 30s: last answer %v", vap, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its own node's condition, through the publisher itself.
	m := &meshState{s: ztunnelGone}
	_, stop := runNodeReadiness(t, onB, kube.NodeReadinessConfig{Node: b, ConditionType: typ}, m)
	eventually(t, "node "+b+"'s condition False", func() bool {
		n, err := c.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
		must(t, err)
		return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return string(c.Type) == typ && c.Status == corev1.ConditionFalse && c.Reason == "ZtunnelDisconnected"
		})
	})
	stop()
	for _, tc := range []struct {
		what, node, patch, want string
	}{
		{"another node's condition", a, ours, "may not change node '" + a + "'"},
		{"another condition", b, `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"X"}]}}`, "only the condition " + typ},
		{"the addresses", b, `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.9"}]}}`, "only the condition " + typ},
		{"the capacity", b, `{"status":{"capacity":{"pods":"1"}}}`, "only the condition " + typ},
	} {
		if err := statusPatch(onB, tc.node, tc.patch, false); !refused(err, tc.want) {
			t.Errorf("meshlet: %s: %v, want refused by %s with %q", tc.what, err, vap, tc.want)
		}
	}
	// Of the taints, only the mesh taint (a meshlet of the mode before an
	// update takes it off): another is refused.
	n, err := c.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
	must(t, err)
	taints := append(slices.Clone(n.Spec.Taints), corev1.Taint{Key: "example.com/x", Effect: corev1.TaintEffectNoSchedule})
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
	must(t, err)
	_, err = onB.CoreV1().Nodes().Patch(ctx, b, types.MergePatchType, patch, metav1.PatchOptions{})
	if !refused(err, "only the taint "+nodeTaint) {
		t.Errorf("another taint of its node in condition mode: %v, want refused by %s", err, vap)
	}
	// Removed on an uninstall.
	must(t, kube.NewNodeReadiness(onB, kube.NodeReadinessConfig{Node: b, ConditionType: typ}).Remove(ctx))
	n, err = c.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
	must(t, err)
	if slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return string(c.Type) == typ }) {
		t.Errorf("node %s keeps condition %s after Remove", b, typ)
	}
}

// TestReleaseNodes: meshlet release-nodes (the chart's pre-delete hook)
// marks the DaemonSet as being uninstalled, on which a running meshlet
// (following it as the daemon does, DaemonSetWatch.Keeps) takes its node's
// taint off at once, well within the wait; what no meshlet takes off (a
// node whose meshlet is not running) it takes off itself once the wait is
// over. Every other taint and condition stays.
func TestReleaseNodes(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	ns := namespace(t, c, nil)
	// release-nodes looks at every node: a taint and a condition of this
	// test's own, so that the other tests' nodes (one API server) are not
	// held, nor released.
	nodeTaint := fmt.Sprintf("release-%d.meshlet.test/not-ready", seq.Add(1))
	typ := strings.Replace(nodeTaint, "not-ready", "MeshReady", 1)
	dset, err := c.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "meshlet"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "meshlet"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "meshlet"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "meshlet", Image: "meshlet.test/pause:1",
				Env: []corev1.EnvVar{{Name: "MESHLET_NODE_TAINT", Value: nodeTaint}}}}}},
	}}, metav1.CreateOptions{})
	must(t, err)
	other := corev1.Taint{Key: "example.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	// A node with the mesh taint, or meshlet's condition, or neither.
	node := func(i int, meshTaint, meshCondition bool) string {
		name := fmt.Sprintf("release-%d-%d", i, seq.Add(1))
		taints := []corev1.Taint{other}
		if meshTaint {
			taints = append(taints, corev1.Taint{Key: nodeTaint, Value: meshready.ReasonZtunnel, Effect: corev1.TaintEffectNoSchedule})
		}
		_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}}, metav1.CreateOptions{})
		must(t, err)
		conditions := `{"type":"Ready","status":"True","reason":"KubeletReady"}`
		if meshCondition {
			conditions = `{"type":"` + typ + `","status":"False","reason":"X"},` + conditions
		}
		_, err = c.CoreV1().Nodes().PatchStatus(ctx, name, []byte(`{"status":{"conditions":[`+conditions+`]}}`))
		must(t, err)
		return name
	}
	released := func(name string) {
		t.Helper()
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		// (The API server's own, node.kubernetes.io/not-ready, stays too.)
		if slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == nodeTaint }) || !slices.Contains(n.Spec.Taints, other) {
			t.Errorf("node %s taints %+v, want %+v and no mesh taint", name, n.Spec.Taints, other)
		}
		if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != corev1.NodeReady {
			t.Errorf("node %s conditions %+v, want only Ready", name, n.Status.Conditions)
		}
	}

	// A node whose meshlet runs (its pod the DaemonSet's) and follows the
	// DaemonSet.
	running := node(0, false, false)
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "meshlet-0",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "meshlet", UID: dset.UID, Controller: ptr(true)}}},
		Spec: corev1.PodSpec{NodeName: running, AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "meshlet", Image: "meshlet.test/pause:1"}}}},
		metav1.CreateOptions{})
	must(t, err)
	_, wctx := ktesting.NewTestContext(t)
	wctx, cancel := context.WithCancel(wctx)
	defer cancel()
	ds := kube.WatchDaemonSet(wctx, c, ns, pod.Name)
	eventually(t, "the DaemonSet's template seen", func() bool { return ds.Template() != nil })
	if !ds.Keeps(nodeTaint, "") || ds.Keeps("mesh.example.com/not-ready", "") {
		t.Fatalf("Keeps: want the template's key kept, and no other")
	}
	nr := kube.NewNodeReadiness(c, kube.NodeReadinessConfig{Node: running, TaintKey: nodeTaint})
	done := make(chan struct{})
	go func() {
		defer close(done)
		nr.Run(wctx, (&meshState{s: ztunnelGone}).get, func() bool { return ds.Keeps(nodeTaint, "") })
	}()
	defer func() { cancel(); <-done }()
	waitTaint(t, c, running, nodeTaint, meshready.ReasonZtunnel)

	const wait = 20 * time.Second
	start := time.Now()
	must(t, kube.ReleaseNodes(wctx, c, kube.ObjectRef{Namespace: ns, Name: "meshlet"}, nodeTaint, typ, wait))
	took := time.Since(start)
	if took > wait/2 {
		t.Errorf("release-nodes took %v: the running meshlet did not take its taint off within %v", took, wait/2)
	}
	got, err := c.AppsV1().DaemonSets(ns).Get(ctx, "meshlet", metav1.GetOptions{})
	must(t, err)
	if at, err := time.Parse(time.RFC3339, got.Annotations[kube.UninstallingAnnotation]); err != nil || time.Since(at) > time.Minute {
		t.Errorf("DaemonSet annotations %v, want %s with the time", got.Annotations, kube.UninstallingAnnotation)
	}
	if ds.Keeps(nodeTaint, "") {
		t.Error("Keeps, the DaemonSet being uninstalled: want false")
	}
	// The running meshlet keeps it off (and its condition: none here).
	time.Sleep(2 * nodeReadinessLook)
	n, err := c.CoreV1().Nodes().Get(ctx, running, metav1.GetOptions{})
	must(t, err)
	if slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == nodeTaint }) {
		t.Errorf("node %s: the mesh taint came back after the release: %+v", running, n.Spec.Taints)
	}
	t.Logf("release-nodes with a running meshlet: %v", took.Round(time.Millisecond))

	// A node whose meshlet is not running: taken off after the wait.
	down := node(1, true, true)
	start = time.Now()
	must(t, kube.ReleaseNodes(wctx, c, kube.ObjectRef{Namespace: ns, Name: "meshlet"}, nodeTaint, typ, time.Second))
	if took := time.Since(start); took < time.Second {
		t.Errorf("release-nodes returned after %v, before its wait, with node %s still held", took, down)
	}
	released(down)

	// Without the DaemonSet: at once.
	must(t, c.AppsV1().DaemonSets(ns).Delete(ctx, "meshlet", metav1.DeleteOptions{}))
	must(t, kube.ReleaseNodes(wctx, c, kube.ObjectRef{Namespace: ns, Name: "meshlet"}, nodeTaint, typ, time.Minute))
}

// nodeReadinessLook is how often the publisher looks (kube's
// nodeReadinessPoll).
const nodeReadinessLook = 100 * time.Millisecond
