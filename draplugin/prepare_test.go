package draplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/meshready"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/draplugin/claimstore"
	"github.com/meshlet/meshlet/internal/latency"
	"github.com/meshlet/meshlet/internal/privtest"
)

const testNode = "node-1"

// quiet is a context whose logger drops the refusals the tests provoke.
var quiet = klog.NewContext(context.Background(), logr.Discard())

// fakePods answers LookupPod from a table by pod UID; a pod not in it is a
// plain pod in the claim's namespace.
type fakePods struct {
	pods map[string]enroll.Pod
	info map[string]enroll.PodInfo
	err  map[string]error
	// gone pods are deleted or being deleted.
	gone map[string]bool
}

func (f *fakePods) LookupPod(_ context.Context, namespace, name, uid string) (enroll.Pod, enroll.PodInfo, bool, error) {
	if err := f.err[uid]; err != nil {
		return enroll.Pod{}, enroll.PodInfo{}, false, err
	}
	if f.gone[uid] {
		return enroll.Pod{}, enroll.PodInfo{}, false, nil
	}
	if p, ok := f.pods[uid]; ok {
		return p, f.info[uid], true, nil
	}
	return enroll.Pod{UID: uid, Name: name, Namespace: namespace, NetnsPath: "/var/run/netns/" + name}, enroll.PodInfo{}, true, nil
}

// policyFunc is an Eligibility fake.
type policyFunc func(pod *enroll.Pod, info enroll.PodInfo) error

func (f policyFunc) ClaimConflict(pod *enroll.Pod, info enroll.PodInfo) error { return f(pod, info) }

var allowAll = policyFunc(func(*enroll.Pod, enroll.PodInfo) error { return nil })

type noRecords struct{}

func (noRecords) Record(string) (enroll.Record, bool) { return enroll.Record{}, false }

type testDriver struct {
	*Driver
	dir      string
	store    *claimstore.Store
	pods     *fakePods
	prepared chan []string
}

func newTestDriver(t testing.TB, pol Eligibility) *testDriver {
	t.Helper()
	dir := t.TempDir()
	td := &testDriver{dir: dir, store: openStore(t, dir), pods: &fakePods{}, prepared: make(chan []string, 100)}
	if pol == nil {
		pol = allowAll
	}
	d, err := New(DefaultConfig(), Deps{
		// Prepare and Unprepare never call the API server: a fake client
		// only satisfies New (the claim status writer uses it, not here).
		Client:   fake.NewClientset(),
		NodeName: testNode,
		Claims:   td.store,
		Pods:     td.pods,
		Policy:   pol,
		Version:  "v1.2.3", RedirectBackend: "nftables", IPv6: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.Lead(Node{State: func() meshready.State { return meshready.State{Ready: true} }, Records: noRecords{},
		Prepared: func(pods []string) { td.prepared <- pods }})
	td.Driver = d
	return td
}

func (td *testDriver) prepare(t testing.TB, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res, err := td.PrepareResourceClaims(quiet, claims)
	if err != nil {
		t.Fatalf("PrepareResourceClaims: %v", err)
	}
	if len(res) != len(claims) {
		t.Fatalf("PrepareResourceClaims returned %d results for %d claims", len(res), len(claims))
	}
	return res
}

func (td *testDriver) waitPrepared(t *testing.T) []string {
	t.Helper()
	select {
	case pods := <-td.prepared:
		return pods
	case <-time.After(5 * time.Second):
		t.Fatal("Prepared callback not called")
		return nil
	}
}

func (td *testDriver) fileBytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(td.dir, claimstore.FileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rclaim builds an allocated claim in namespace app reserved for pod
// <name>-pod (UID <uid>-pod), with one result of the driver for request
// "mesh" on this node's shared device.
func rclaim(uid, name string, opts ...func(*resourceapi.ResourceClaim)) *resourceapi.ResourceClaim {
	share := types.UID("share-" + uid)
	rc := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "app", Name: name},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "mesh", Driver: DefaultDriverName, Pool: testNode, Device: DeviceName, ShareID: &share}},
			}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name + "-pod", UID: types.UID(uid + "-pod")}},
		},
	}
	for _, o := range opts {
		o(rc)
	}
	return rc
}

func opaque(source resourceapi.AllocationConfigSource, driver string, requests []string, params string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: source, Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}},
	}}
}

func withConfig(cfgs ...resourceapi.DeviceAllocationConfiguration) func(*resourceapi.ResourceClaim) {
	return func(rc *resourceapi.ResourceClaim) {
		rc.Status.Allocation.Devices.Config = append(rc.Status.Allocation.Devices.Config, cfgs...)
	}
}

func params(fields string) string {
	if fields != "" {
		fields = "," + fields
	}
	return `{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig"` + fields + `}`
}

const (
	fromClass = resourceapi.AllocationConfigSourceClass
	fromClaim = resourceapi.AllocationConfigSourceClaim
)

// TestPrepareValid: a valid claim is answered with its device, stored
// with its pods and settings, and its pods are handed to Prepared.
func TestPrepareValid(t *testing.T) {
	td := newTestDriver(t, nil)
	rc := rclaim("uid-1", "web", withConfig(opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":false,"inboundCapture":false`))),
		func(rc *resourceapi.ResourceClaim) {
			// A second pod sharing the claim, and a non-pod consumer (ignored).
			rc.Status.ReservedFor = append(rc.Status.ReservedFor,
				resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "web-pod-2", UID: "uid-1-pod-2"},
				resourceapi.ResourceClaimConsumerReference{APIGroup: "example.com", Resource: "widgets", Name: "w", UID: "w-uid"})
			// Another driver's device in the same claim is not ours.
			rc.Status.Allocation.Devices.Results = append(rc.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: "elsewhere", Device: "gpu-0"})
		})
	res := td.prepare(t, rc)
	r := res["uid-1"]
	if r.Err != nil {
		t.Fatalf("valid claim refused: %v", r.Err)
	}
	share := types.UID("share-uid-1")
	// The gate's CDI device goes with it: the runtime runs meshlet-gate
	// before each of the pod's containers.
	want := []kubeletplugin.Device{{Requests: []string{"mesh"}, PoolName: testNode, DeviceName: DeviceName, ShareID: &share,
		CDIDeviceIDs: []string{"mesh.meshlet.dev/mesh=gate"}}}
	if !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %+v, want %+v", r.Devices, want)
	}

	if td.store.Len() != 1 {
		t.Fatalf("store Len = %d, want 1", td.store.Len())
	}
	wantClaim := claimstore.Claim{
		UID: "uid-1", Namespace: "app", Name: "web", Pods: []string{"uid-1-pod", "uid-1-pod-2"},
		Settings: meshConfig(bp(false), bp(false)),
		Devices:  []claimstore.AllocatedDevice{{Request: "mesh", Pool: testNode, Device: DeviceName, ShareID: "share-uid-1"}},
	}
	for _, pod := range []string{"uid-1-pod", "uid-1-pod-2"} {
		if got := td.store.ForPod(pod); !reflect.DeepEqual(got, []claimstore.Claim{wantClaim}) {
			t.Errorf("ForPod(%s) = %+v\nwant %+v", pod, got, []claimstore.Claim{wantClaim})
		}
	}
	if td.store.Claimed("w-uid") {
		t.Error("a non-pod consumer was stored as a pod")
	}
	// On disk before Prepare returned: a restarted meshlet has it.
	if got := openStore(t, td.dir).ForPod("uid-1-pod"); !reflect.DeepEqual(got, []claimstore.Claim{wantClaim}) {
		t.Errorf("reopened store ForPod = %+v", got)
	}
	if o := podSettings(td.store, "uid-1-pod"); boolp(o.DNSCapture) != "false" || boolp(o.BypassInbound) != "true" {
		t.Errorf("pod settings DNSCapture %s BypassInbound %s, want false true", boolp(o.DNSCapture), boolp(o.BypassInbound))
	}
	if pods := td.waitPrepared(t); !reflect.DeepEqual(pods, []string{"uid-1-pod", "uid-1-pod-2"}) {
		t.Errorf("Prepared called with %v", pods)
	}

	// Prepared again (the kubelet retries): same result, still one claim.
	if res := td.prepare(t, rc); res["uid-1"].Err != nil || td.store.Len() != 1 {
		t.Errorf("second Prepare: %v, Len %d", res["uid-1"].Err, td.store.Len())
	}
}

// TestPrepareSettingsMerge: the class's configuration first, then the
// claim's, field by field; configurations for another driver or another
// request do not apply; a main request's configuration covers its
// subrequests.
func TestPrepareSettingsMerge(t *testing.T) {
	td := newTestDriver(t, nil)
	cases := []struct {
		name    string
		request string
		cfgs    []resourceapi.DeviceAllocationConfiguration
		dns     string
		inbound string
	}{
		{"no config: node defaults", "mesh", nil, "nil", "nil"},
		{"class only", "mesh", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClass, DefaultDriverName, []string{"mesh"}, params(`"dnsCapture":true,"inboundCapture":false`)),
		}, "true", "false"},
		{"claim wins over class, field by field", "mesh", []resourceapi.DeviceAllocationConfiguration{
			// The claim's configuration comes first in the list: precedence
			// is by source, not by position.
			opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":false`)),
			opaque(fromClass, DefaultDriverName, []string{"mesh"}, params(`"dnsCapture":true,"inboundCapture":false`)),
		}, "false", "false"},
		{"later claim config wins over earlier", "mesh", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":false`)),
			opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":true`)),
		}, "true", "nil"},
		{"another driver's config is ignored, even if not a MeshConfig", "mesh", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClaim, "gpu.example.com", nil, `{"dnsCapture":"bogus","whatever":1}`),
			opaque(fromClaim, "gpu.example.com", nil, params(`"dnsCapture":false`)),
		}, "nil", "nil"},
		{"another request's config is ignored, even if invalid", "mesh", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClaim, DefaultDriverName, []string{"other"}, params(`"dnsCapture":false,"bogus":1`)),
			opaque(fromClass, DefaultDriverName, []string{"other"}, params(`"inboundCapture":false`)),
		}, "nil", "nil"},
		{"main request's config covers its subrequest", "main/sub", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClaim, DefaultDriverName, []string{"main"}, params(`"dnsCapture":false`)),
			opaque(fromClass, DefaultDriverName, []string{"main/sub"}, params(`"inboundCapture":false`)),
			opaque(fromClaim, DefaultDriverName, []string{"main/other"}, params(`"inboundCapture":true`)),
			opaque(fromClaim, DefaultDriverName, []string{"mainly"}, params(`"dnsCapture":true`)),
		}, "false", "false"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			uid := fmt.Sprintf("merge-%d", i)
			rc := rclaim(uid, "c", withConfig(c.cfgs...), func(rc *resourceapi.ResourceClaim) {
				rc.Status.Allocation.Devices.Results[0].Request = c.request
			})
			r := td.prepare(t, rc)[types.UID(uid)]
			if r.Err != nil {
				t.Fatalf("refused: %v", r.Err)
			}
			if len(r.Devices) != 1 || !reflect.DeepEqual(r.Devices[0].Requests, []string{c.request}) {
				t.Errorf("devices %+v, want request %s", r.Devices, c.request)
			}
			got := td.store.ForPod(uid + "-pod")
			if len(got) != 1 {
				t.Fatalf("ForPod = %+v", got)
			}
			s := got[0].Settings
			if boolp(s.DNSCapture) != c.dns || boolp(s.InboundCapture) != c.inbound {
				t.Errorf("settings dnsCapture %s inboundCapture %s, want %s %s", boolp(s.DNSCapture), boolp(s.InboundCapture), c.dns, c.inbound)
			}
			if s.APIVersion != "meshlet.dev/v1alpha1" || s.Kind != "MeshConfig" {
				t.Errorf("stored settings %+v lack apiVersion/kind", s)
			}
		})
	}
}

// TestPrepareInvalidConfig: every invalid configuration is reported with
// its path in the claim or the class; the claim is not stored.
func TestPrepareInvalidConfig(t *testing.T) {
	td := newTestDriver(t, nil)
	if err := td.store.Put(testClaim("existing", []string{"p0"}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	before := td.fileBytes(t)
	cases := []struct {
		name string
		cfgs []resourceapi.DeviceAllocationConfiguration
		want []string
	}{
		{"claim config index counts claim configs only", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClass, DefaultDriverName, nil, params("")),
			opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":true`)),
			opaque(fromClass, DefaultDriverName, nil, params("")),
			opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":"no"`)),
		}, []string{`spec.devices.config[1].opaque.parameters.dnsCapture: want true or false, got a string "no"`}},
		{"another driver's config still counts in the index", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClaim, "gpu.example.com", nil, `{}`),
			opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":1`)),
		}, []string{`spec.devices.config[1].opaque.parameters.dnsCapture`}},
		{"class config", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClaim, DefaultDriverName, nil, params("")),
			opaque(fromClass, DefaultDriverName, nil, `{"apiVersion":"meshlet.dev/v1","kind":"MeshConfig"}`),
		}, []string{`deviceClass.config[0].opaque.parameters.apiVersion: "meshlet.dev/v1", want "meshlet.dev/v1alpha1"`}},
		{"all errors reported", []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClass, DefaultDriverName, nil, `[]`),
			opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCaptur":false`)),
			opaque(fromClaim, DefaultDriverName, nil, params(`"inboundCapture":null,"dnsCapture":"x"`)),
		}, []string{
			`deviceClass.config[0].opaque.parameters: want an object`,
			`spec.devices.config[0].opaque.parameters.dnsCaptur: unknown field`,
			`spec.devices.config[1].opaque.parameters.inboundCapture: want true or false, got null`,
			`spec.devices.config[1].opaque.parameters.dnsCapture: want true or false`,
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			uid := fmt.Sprintf("bad-%d", i)
			r := td.prepare(t, rclaim(uid, "bad", withConfig(c.cfgs...)))[types.UID(uid)]
			if r.Err == nil {
				t.Fatal("invalid configuration accepted")
			}
			msg := r.Err.Error()
			if !strings.Contains(msg, "claim app/bad") || !strings.Contains(msg, "meshlet.dev/v1alpha1 MeshConfig") {
				t.Errorf("error %q does not name the claim and the kind", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q\n does not contain %q", msg, w)
				}
			}
			if r.Devices != nil {
				t.Errorf("refused claim has devices %+v", r.Devices)
			}
			if td.store.Len() != 1 || td.store.Claimed(uid+"-pod") {
				t.Errorf("refused claim stored: Len %d", td.store.Len())
			}
			if now := td.fileBytes(t); string(now) != string(before) {
				t.Errorf("refused claim changed the file")
			}
		})
	}
	select {
	case pods := <-td.prepared:
		t.Errorf("Prepared called with %v though nothing was prepared", pods)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestPrepareConflict: a pod the policy refuses gets an error naming it
// and why; nothing is stored.
func TestPrepareConflict(t *testing.T) {
	t.Run("eligibility error", func(t *testing.T) {
		td := newTestDriver(t, policyFunc(func(pod *enroll.Pod, _ enroll.PodInfo) error {
			if pod.Name == "bad-pod" {
				return errors.New("it is a test refusal")
			}
			return nil
		}))
		rc := rclaim("c1", "shared", func(rc *resourceapi.ResourceClaim) {
			rc.Status.ReservedFor = append(rc.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "bad-pod", UID: "bad-uid"})
		})
		r := td.prepare(t, rc)["c1"]
		if r.Err == nil {
			t.Fatal("claim with a refused pod prepared")
		}
		for _, w := range []string{"claim app/shared", "pod app/bad-pod", "it is a test refusal"} {
			if !strings.Contains(r.Err.Error(), w) {
				t.Errorf("error %q does not contain %q", r.Err, w)
			}
		}
		if td.store.Len() != 0 || td.fileBytes(t) != nil {
			t.Errorf("refused claim stored (Len %d)", td.store.Len())
		}
	})
	t.Run("pod lookup error", func(t *testing.T) {
		td := newTestDriver(t, nil)
		td.pods.err = map[string]error{"c1-pod": errors.New("pod not found")}
		r := td.prepare(t, rclaim("c1", "x"))["c1"]
		if r.Err == nil || !strings.Contains(r.Err.Error(), "pod app/x-pod: lookup failed: pod not found") {
			t.Errorf("err = %v, want the lookup failure naming the pod", r.Err)
		}
		if n := td.Refused.Load(); n != 0 {
			t.Errorf("a failed lookup counted as %d refusals, want 0 (the kubelet retries; nothing was refused)", n)
		}
		if td.store.Len() != 0 {
			t.Error("claim stored")
		}
	})
	t.Run("real policy", func(t *testing.T) {
		pol, err := policy.New(policy.Defaults())
		if err != nil {
			t.Fatal(err)
		}
		td := newTestDriver(t, pol)
		td.pods.pods = map[string]enroll.Pod{
			"hostnet-pod": {UID: "hostnet-pod", Name: "hostnet-pod", Namespace: "app", HostNetwork: true},
			"optout-pod":  {UID: "optout-pod", Name: "optout-pod", Namespace: "app", Labels: map[string]string{"istio.io/dataplane-mode": "none"}},
			"system-pod":  {UID: "system-pod", Name: "system-pod", Namespace: "kube-system"},
			"fine-pod":    {UID: "fine-pod", Name: "fine-pod", Namespace: "app", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}},
		}
		// The API server's current labels win over the sandbox's: opted
		// out since the sandbox was made.
		td.pods.pods["relabelled-pod"] = enroll.Pod{UID: "relabelled-pod", Name: "relabelled-pod", Namespace: "app"}
		td.pods.info = map[string]enroll.PodInfo{"relabelled-pod": {PodLabels: map[string]string{"istio.io/dataplane-mode": "none"}}}
		cases := map[string][]string{
			"hostnet":    {"pod app/hostnet-pod", "host network"},
			"optout":     {"pod app/optout-pod", "opts out", "istio.io/dataplane-mode=none"},
			"system":     {"pod kube-system/system-pod", `namespace "kube-system" is excluded`, "--excluded-namespaces"},
			"relabelled": {"pod app/relabelled-pod", "opts out"},
			"fine":       nil,
		}
		var claims []*resourceapi.ResourceClaim
		for name := range cases {
			ns := "app"
			if name == "system" {
				ns = "kube-system"
			}
			claims = append(claims, rclaim(name, name, func(rc *resourceapi.ResourceClaim) {
				rc.Namespace = ns
				rc.Status.ReservedFor[0].UID = types.UID(name + "-pod")
			}))
		}
		res := td.prepare(t, claims...)
		for name, want := range cases {
			r := res[types.UID(name)]
			if want == nil {
				if r.Err != nil {
					t.Errorf("%s: refused: %v", name, r.Err)
				}
				continue
			}
			if r.Err == nil {
				t.Errorf("%s: prepared, want refused", name)
				continue
			}
			for _, w := range want {
				if !strings.Contains(r.Err.Error(), w) {
					t.Errorf("%s: error %q does not contain %q", name, r.Err, w)
				}
			}
		}
		if td.store.Len() != 1 || !td.store.Claimed("fine-pod") {
			t.Errorf("store Len %d, want only the fine claim", td.store.Len())
		}
	})
}

// TestPrepareRefusesAllocation: claims whose allocation this node cannot
// serve.
func TestPrepareRefusesAllocation(t *testing.T) {
	td := newTestDriver(t, nil)
	cases := map[string]struct {
		mut  func(*resourceapi.ResourceClaim)
		want string
	}{
		"other node": {func(rc *resourceapi.ResourceClaim) {
			rc.Status.Allocation.Devices.Results[0].Pool = "node-2"
		}, "device node-2/mesh is not this node's (node-1)"},
		"other node in second result": {func(rc *resourceapi.ResourceClaim) {
			rc.Status.Allocation.Devices.Results = append(rc.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "mesh2", Driver: DefaultDriverName, Pool: "node-2", Device: "mesh"})
		}, "not this node's"},
		"not allocated": {func(rc *resourceapi.ResourceClaim) {
			rc.Status.Allocation = nil
		}, "not allocated"},
		"reserved for no pod": {func(rc *resourceapi.ResourceClaim) {
			rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "example.com", Resource: "widgets", Name: "w", UID: "w"}}
		}, "reserved for no running pod"},
		"reserved only for a deleted pod": {func(rc *resourceapi.ResourceClaim) {
			rc.Status.ReservedFor[0].UID = "deleted-pod"
		}, "reserved for no running pod"},
	}
	td.pods.gone = map[string]bool{"deleted-pod": true}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			uid := types.UID(strings.ReplaceAll(name, " ", "-"))
			r := td.prepare(t, rclaim(string(uid), "x", c.mut))[uid]
			if r.Err == nil || !strings.Contains(r.Err.Error(), c.want) {
				t.Errorf("err = %v, want one containing %q", r.Err, c.want)
			}
			if td.store.Len() != 0 {
				t.Errorf("refused claim stored")
			}
		})
	}
	if td.fileBytes(t) != nil {
		t.Error("refused claims wrote the claims file")
	}
}

// TestPrepareMixedBatch: in one call, a good claim is stored and a bad
// one refused; neither affects the other.
func TestPrepareMixedBatch(t *testing.T) {
	td := newTestDriver(t, nil)
	good := rclaim("good", "good")
	bad := rclaim("bad", "bad", func(rc *resourceapi.ResourceClaim) { rc.Status.Allocation.Devices.Results[0].Pool = "node-9" })
	good2 := rclaim("good2", "good2", withConfig(opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":false`))))
	res := td.prepare(t, good, bad, good2)
	if res["good"].Err != nil || len(res["good"].Devices) != 1 || res["good2"].Err != nil {
		t.Errorf("good claims: %+v %+v", res["good"], res["good2"])
	}
	if res["bad"].Err == nil || !strings.Contains(res["bad"].Err.Error(), "claim app/bad") {
		t.Errorf("bad claim: %v", res["bad"].Err)
	}
	r := openStore(t, td.dir)
	if r.Len() != 2 || !r.Claimed("good-pod") || !r.Claimed("good2-pod") || r.Claimed("bad-pod") {
		t.Errorf("stored Len %d good %t good2 %t bad %t", r.Len(), r.Claimed("good-pod"), r.Claimed("good2-pod"), r.Claimed("bad-pod"))
	}
	pods := td.waitPrepared(t)
	slices.Sort(pods)
	if !reflect.DeepEqual(pods, []string{"good-pod", "good2-pod"}) {
		t.Errorf("Prepared called with %v", pods)
	}
	if n := td.Refused.Load(); n != 1 {
		t.Errorf("refusals counted: %d, want 1", n)
	}
}

// TestPrepareStoreFails: when the claims cannot be stored, the whole call
// fails (the kubelet retries it) and no pod is handed over.
func TestPrepareStoreFails(t *testing.T) {
	td := newTestDriver(t, nil)
	privtest.ReadOnlyDir(t, td.dir)
	res, err := td.PrepareResourceClaims(quiet, []*resourceapi.ResourceClaim{rclaim("c", "c")})
	if err == nil || !strings.Contains(err.Error(), "store prepared claims") {
		t.Fatalf("PrepareResourceClaims = %v, %v; want the store's error", res, err)
	}
	if td.store.Claimed("c-pod") {
		t.Error("claim in the store though it is not on disk")
	}
	select {
	case pods := <-td.prepared:
		t.Errorf("Prepared called with %v", pods)
	case <-time.After(50 * time.Millisecond):
	}
}

func unprepare(t *testing.T, td *testDriver, uids ...string) map[types.UID]error {
	t.Helper()
	var objs []kubeletplugin.NamespacedObject
	for _, uid := range uids {
		objs = append(objs, kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "app", Name: "n-" + uid}, UID: types.UID(uid)})
	}
	res, err := td.UnprepareResourceClaims(quiet, objs)
	if err != nil {
		t.Fatalf("UnprepareResourceClaims: %v", err)
	}
	for _, uid := range uids {
		if _, ok := res[types.UID(uid)]; !ok {
			t.Errorf("no result for claim %s", uid)
		}
	}
	for uid, err := range res {
		if err != nil {
			t.Errorf("claim %s: %v", uid, err)
		}
	}
	return res
}

func TestUnprepare(t *testing.T) {
	td := newTestDriver(t, nil)
	unprepare(t, td, "never-seen")
	if td.fileBytes(t) != nil {
		t.Error("Unprepare of an unknown claim wrote the file")
	}

	td.prepare(t, rclaim("a", "a"), rclaim("b", "b"))
	unprepare(t, td, "a", "never-seen")
	if td.store.Claimed("a-pod") || !td.store.Claimed("b-pod") {
		t.Errorf("after Unprepare(a): a %t b %t", td.store.Claimed("a-pod"), td.store.Claimed("b-pod"))
	}
	if r := openStore(t, td.dir); r.Claimed("a-pod") || r.Len() != 1 {
		t.Errorf("unprepared claim still on disk")
	}
	unprepare(t, td, "a")
	unprepare(t, td, "b", "b")
	if td.store.Len() != 0 || openStore(t, td.dir).Len() != 0 {
		t.Errorf("claims left after unpreparing all: %d", td.store.Len())
	}

	// A claim prepared by the other meshlet of a rolling update.
	other := openStore(t, td.dir)
	if err := other.Put(testClaim("theirs", []string{"their-pod"}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	unprepare(t, td, "theirs")
	if other.Claimed("their-pod") {
		t.Error("claim prepared by the other meshlet not unprepared")
	}
}

// BenchmarkPrepare: one claim prepared, stored (fsync'd) in a real file on
// the default disk. Reports p50/p99 besides the mean.
func BenchmarkPrepare(b *testing.B) {
	td := newTestDriver(b, nil)
	go func() { // never closed: Prepared may still be sending when b ends
		for range td.prepared {
		}
	}()
	rc := rclaim("bench", "bench", withConfig(opaque(fromClaim, DefaultDriverName, nil, params(`"dnsCapture":false`))))
	ctx := quiet
	claims := []*resourceapi.ResourceClaim{rc}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := td.PrepareResourceClaims(ctx, claims)
		if err != nil || res["bench"].Err != nil {
			b.Fatal(err, res["bench"].Err)
		}
		lat = append(lat, time.Since(start))
	}
	latency.Report(b, lat)
}

// TestStandby: a driver that does not lead the node (a new meshlet waiting
// for the previous one to exit) prepares and stores claims, which the
// leading meshlet's hook reads from the shared file, reports its device's
// health Unknown (it cannot vouch for it) and has no pods to converge.
func TestStandby(t *testing.T) {
	dir := t.TempDir()
	store := openStore(t, dir)
	d, err := New(DefaultConfig(), Deps{Client: fake.NewClientset(), NodeName: testNode, Claims: store,
		Pods: &fakePods{}, Policy: allowAll, Version: "v1.2.3", RedirectBackend: "nftables"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.PrepareResourceClaims(quiet, []*resourceapi.ResourceClaim{rclaim("c1", "web")})
	if err != nil || res["c1"].Err != nil {
		t.Fatalf("standby Prepare: %v %v", err, res["c1"].Err)
	}
	if leader := openStore(t, dir); !leader.Claimed("c1-pod") {
		t.Fatal("the claim a standby prepared is not in the shared file")
	}
	if d.DeviceReady() {
		t.Fatal("a standby reports its device ready")
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport, 1)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	select {
	case r := <-reports:
		if len(r.Devices) != 1 || r.Devices[0].Health != kubeletplugin.HealthStatusUnknown {
			t.Fatalf("a standby reported %+v, want the device Unknown", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a standby reported no health")
	}
	d.setState(meshready.State{Ready: true}) // what Run does on Lead, before it reports
	d.Lead(Node{State: func() meshready.State { return meshready.State{Ready: true} }, Records: noRecords{}})
	select {
	case r := <-reports:
		if len(r.Devices) != 1 || r.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
			t.Fatalf("health after Lead: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no health report after Lead")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPrepareSkipsGonePods: a claim still reserved for a deleted pod next
// to a running one is prepared for the running one; the deleted pod is
// neither checked nor stored.
func TestPrepareSkipsGonePods(t *testing.T) {
	td := newTestDriver(t, policyFunc(func(pod *enroll.Pod, _ enroll.PodInfo) error {
		if pod.UID == "deleted-pod" {
			return errors.New("a deleted pod was checked")
		}
		return nil
	}))
	td.pods.gone = map[string]bool{"deleted-pod": true}
	rc := rclaim("c1", "web", func(rc *resourceapi.ResourceClaim) {
		rc.Status.ReservedFor = append([]resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "old", UID: "deleted-pod"}}, rc.Status.ReservedFor...)
	})
	if r := td.prepare(t, rc)["c1"]; r.Err != nil {
		t.Fatalf("Prepare: %v", r.Err)
	}
	if got := td.store.ForPod("c1-pod"); len(got) != 1 || !reflect.DeepEqual(got[0].Pods, []string{"c1-pod"}) {
		t.Fatalf("stored %+v, want the claim for c1-pod only", got)
	}
}
