package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The DRA facts deploy/dra.yaml and rbac.yaml are written for.
const (
	driver       = "mesh.meshlet.dev"
	sliceVAP     = "meshlet-resourceslices" // the ValidatingAdmissionPolicy's name
	meshDevice   = "mesh"
	meshRequest  = "mesh"
	notReadyKey  = "mesh.meshlet.dev/not-ready"
	testShareID  = "0b7c3f4e-5a6d-4e8f-9a1b-2c3d4e5f6a7b"
	enrolledCond = "Enrolled"
)

// applyDRA creates deploy/dra.yaml's objects (once: later calls find
// them).
func applyDRA(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	applyManifest(t, c, "dra.yaml")
}

// meshletOn returns a client authenticated as deploy/rbac.yaml's meshlet
// service account with a token bound to a meshlet pod on nodeName, as the
// kubelet gives the DaemonSet's pod: the API server adds the node to the
// token's user as extra authentication.kubernetes.io/node-name.
func meshletOn(t *testing.T, c kubernetes.Interface, nodeName string) kubernetes.Interface {
	t.Helper()
	applyRBAC(t, c)
	return serviceAccountOn(t, c, nodeName, "meshlet")
}

// serviceAccountOn is meshletOn for meshlet-system's service account sa,
// whose role the caller applied.
func serviceAccountOn(t *testing.T, c kubernetes.Interface, nodeName, sa string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := podOn(t, c, nodeName, "meshlet-system", fmt.Sprintf("%s-%s-%d", sa, nodeName, seq.Add(1)), sa, nil)
	rc := boundClient(t, c, p, sa)
	// The premise of everything the test checks: the token names the node.
	who, err := rc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	must(t, err)
	if u := who.Status.UserInfo; u.Username != "system:serviceaccount:meshlet-system:"+sa ||
		len(u.Extra["authentication.kubernetes.io/node-name"]) != 1 || u.Extra["authentication.kubernetes.io/node-name"][0] != nodeName {
		t.Fatalf("token bound to a pod on %s authenticates as %+v, want meshlet with node-name %s", nodeName, u, nodeName)
	}
	return rc
}

// boundClient is a client of service account sa of pod p's namespace, with
// a token bound to p (as the kubelet gives a pod).
func boundClient(t *testing.T, c kubernetes.Interface, p *corev1.Pod, sa string) kubernetes.Interface {
	t.Helper()
	tok, err := c.CoreV1().ServiceAccounts(p.Namespace).CreateToken(context.Background(), sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: ptr(int64(3600)),
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}, metav1.CreateOptions{})
	must(t, err)
	rc, err := kubernetes.NewForConfig(api(t).ConfigWithToken(tok.Status.Token))
	must(t, err)
	return rc
}

// meshSlice is the ResourceSlice meshlet publishes for nodeName: pool =
// node, one shareable device, tainted while the node cannot enroll.
func meshSlice(nodeName, drv string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: nodeName + "-" + drv + "-"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   drv,
			NodeName: ptr(nodeName),
			Pool:     resourcev1.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{
				Name:                     meshDevice,
				AllowMultipleAllocations: ptr(true),
				Taints:                   []resourcev1.DeviceTaint{{Key: notReadyKey, Effect: resourcev1.DeviceTaintEffectNoSchedule}},
			}},
		},
	}
}

// refusedBySliceVAP: err is the policy's refusal (reason Forbidden, as
// dra.yaml sets it), naming the policy and containing want.
func refusedBySliceVAP(err error, want string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+sliceVAP+"'") &&
		strings.Contains(err.Error(), want)
}

// TestRBACDRA: deploy/rbac.yaml and dra.yaml let a node's meshlet publish
// its own node's mesh ResourceSlice, read claims and report a claim's
// device status for claims allocated on its node, and nothing more.
func TestRBACDRA(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	applyDRA(t, c)
	onA := meshletOn(t, c, "node-a")
	onB := meshletOn(t, c, "node-b")

	// The policy is enforced once the API server's admission has loaded
	// it and its binding: wait for the refusal (dry run: nothing is
	// stored while it is not yet active).
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := onA.ResourceV1().ResourceSlices().Create(ctx, meshSlice("node-b", driver), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if refusedBySliceVAP(err, "node-b") {
			break
		}
		if err != nil && !refusedBySliceVAP(err, "") {
			t.Fatalf("dry-run create of node-b's slice by node-a's meshlet: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("ValidatingAdmissionPolicy %s not enforced after 30s: last answer %v", sliceVAP, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Its own node's slice: create, update, delete.
	own, err := onA.ResourceV1().ResourceSlices().Create(ctx, meshSlice("node-a", driver), metav1.CreateOptions{})
	must(t, err)
	own.Spec.Devices[0].Taints = nil // the node can enroll now
	own, err = onA.ResourceV1().ResourceSlices().Update(ctx, own, metav1.UpdateOptions{})
	must(t, err)
	// The slice controller lists and watches (by field selector).
	_, err = onA.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a,spec.driver=" + driver})
	must(t, err)

	// Another node's slice (here published by the admin, whom the policy
	// does not limit) cannot be created, changed or deleted.
	other, err := c.ResourceV1().ResourceSlices().Create(ctx, meshSlice("node-b", driver), metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() {
		_ = c.ResourceV1().ResourceSlices().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	_, err = onA.ResourceV1().ResourceSlices().Create(ctx, meshSlice("node-b", driver), metav1.CreateOptions{})
	if !refusedBySliceVAP(err, "may not change the ResourceSlice of node 'node-b'") {
		t.Errorf("node-a's meshlet creating node-b's slice: %v, want refused by %s", err, sliceVAP)
	}
	other.Spec.Devices[0].Taints = nil
	_, err = onA.ResourceV1().ResourceSlices().Update(ctx, other, metav1.UpdateOptions{})
	if !refusedBySliceVAP(err, "node-b") {
		t.Errorf("node-a's meshlet updating node-b's slice: %v, want refused by %s", err, sliceVAP)
	}
	err = onA.ResourceV1().ResourceSlices().Delete(ctx, other.Name, metav1.DeleteOptions{})
	if !refusedBySliceVAP(err, "node-b") {
		t.Errorf("node-a's meshlet deleting node-b's slice: %v, want refused by %s", err, sliceVAP)
	}
	err = onB.ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{})
	if !refusedBySliceVAP(err, "node-a") {
		t.Errorf("node-b's meshlet deleting node-a's slice: %v, want refused by %s", err, sliceVAP)
	}
	// Nor another driver's slice on its own node, nor a slice for all
	// nodes, nor anything with a token not bound to a node.
	_, err = onA.ResourceV1().ResourceSlices().Create(ctx, meshSlice("node-a", "gpu.example.com"), metav1.CreateOptions{})
	if !refusedBySliceVAP(err, "gpu.example.com") {
		t.Errorf("meshlet creating another driver's slice: %v, want refused by %s", err, sliceVAP)
	}
	all := meshSlice("node-a", driver)
	all.Spec.NodeName, all.Spec.AllNodes = nil, ptr(true)
	_, err = onA.ResourceV1().ResourceSlices().Create(ctx, all, metav1.CreateOptions{})
	if !refusedBySliceVAP(err, "not for one node") {
		t.Errorf("meshlet creating a slice for all nodes: %v, want refused by %s", err, sliceVAP)
	}
	_, err = unboundMeshlet(t).ResourceV1().ResourceSlices().Create(ctx, meshSlice("node-a", driver), metav1.CreateOptions{})
	if !refusedBySliceVAP(err, "not bound to a pod on a node") {
		t.Errorf("meshlet with a token bound to no pod creating a slice: %v, want refused by %s", err, sliceVAP)
	}
	must(t, onA.ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{}))

	// Claims: a claim allocated (as the scheduler would) on node-a.
	ns := namespace(t, c, nil)
	claim, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "mesh"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: meshRequest, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: driver},
		}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	claim.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: meshRequest, Driver: driver, Pool: "node-a", Device: meshDevice,
			// The scheduler gives each allocation of a device with
			// allowMultipleAllocations a share ID; status.devices names it.
			ShareID: ptr(types.UID(testShareID)),
		}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}},
		}}},
	}
	_, err = c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	must(t, err)

	// Prepare reads a pod's RuntimeClass handler.
	if _, err := onA.NodeV1().RuntimeClasses().Get(ctx, "absent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get a RuntimeClass as meshlet: %v, want NotFound (allowed, absent)", err)
	}

	// meshlet gets the claim (NodePrepareResources) and reports the
	// enrollment in status.devices.
	enrolled := func(rc kubernetes.Interface, message string) error {
		got, err := rc.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got.Status.Devices = []resourcev1.AllocatedDeviceStatus{{
			Driver: driver, Pool: "node-a", Device: meshDevice, ShareID: ptr(testShareID),
			Conditions: []metav1.Condition{{Type: enrolledCond, Status: metav1.ConditionTrue, Reason: enrolledCond,
				Message: message, LastTransitionTime: metav1.Now()}},
		}}
		_, err = rc.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return err
	}
	must(t, enrolled(onA, "enrolled by node-a's meshlet"))
	got, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	must(t, err)
	if len(got.Status.Devices) != 1 || len(got.Status.Devices[0].Conditions) != 1 ||
		got.Status.Devices[0].Conditions[0].Message != "enrolled by node-a's meshlet" {
		t.Fatalf("status.devices after node-a's meshlet reported: %+v", got.Status.Devices)
	}
	// Another node's meshlet cannot: associated-node:update holds only for
	// the node the claim is allocated on. The API server refuses the
	// status.devices field (Invalid, a Forbidden field error).
	err = enrolled(onB, "enrolled by node-b's meshlet")
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.devices: Forbidden") ||
		!strings.Contains(err.Error(), `resource="resourceclaims/driver"`) {
		t.Errorf("node-b's meshlet writing status.devices of a claim on node-a: %v, want status.devices Forbidden (resourceclaims/driver)", err)
	}

	// Its status update cannot allocate or reserve the claim: that needs
	// resourceclaims/binding.
	got.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "uid-p"}}
	_, err = onA.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `resource="resourceclaims/binding"`) {
		t.Errorf("meshlet reserving a claim: %v, want status.allocation Forbidden (resourceclaims/binding)", err)
	}

	// And nothing more.
	forbidden := map[string]error{
		"list claims": func() error {
			_, err := onA.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			return err
		}(),
		"delete claim": onA.ResourceV1().ResourceClaims(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}),
		"patch claim status": func() error {
			_, err := onA.ResourceV1().ResourceClaims(ns).Patch(ctx, claim.Name, types.MergePatchType, []byte(`{"status":{"devices":[]}}`), metav1.PatchOptions{}, "status")
			return err
		}(),
		"create device class": func() error {
			_, err := onA.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}}, metav1.CreateOptions{})
			return err
		}(),
		"get slice": func() error {
			_, err := onA.ResourceV1().ResourceSlices().Get(ctx, other.Name, metav1.GetOptions{})
			return err
		}(),
		"delete slices (collection)": onA.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		// Its own node's mesh taint only (TestRBACNodeReadiness).
		"relabel node": func() error {
			n, _ := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			n.Labels = map[string]string{"example.com/x": "y"}
			_, err := onA.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}(),
	}
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as meshlet: %v, want Forbidden", what, err)
		}
	}
	// The node's UID, for the slice's owner reference.
	_, err = onA.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	must(t, err)
}
