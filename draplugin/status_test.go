package draplugin

import (
	"context"
	"net/netip"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/meshready"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// records is a Records fake: the enrolled pods' records by UID.
type records map[string]enroll.Record

func (r records) Record(uid string) (enroll.Record, bool) { rec, ok := r[uid]; return rec, ok }

// TestClaimStatus writes a shared claim's device status through a fake
// API client (the real API server's checks are in agent/kube's
// TestRBACDRA): Enrolled while any of its pods is, with their IPs; not
// once none is, and without stale addresses.
func TestClaimStatus(t *testing.T) {
	share := types.UID("share-1")
	client := fake.NewClientset(&resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{UID: "c1", Namespace: "app", Name: "mesh", Generation: 3},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "mesh", Driver: DefaultDriverName, Pool: testNode, Device: DeviceName, ShareID: &share}}}}},
	})
	store := openStore(t, t.TempDir())
	c := claimstore.Claim{UID: "c1", Namespace: "app", Name: "mesh", Pods: []string{"p1", "p2"},
		Devices: []claimstore.AllocatedDevice{{Request: "mesh", Pool: testNode, Device: DeviceName, ShareID: string(share)}}}
	if err := store.Put(c); err != nil {
		t.Fatal(err)
	}
	d, err := New(DefaultConfig(), Deps{Client: client, NodeName: testNode, Claims: store, Pods: &fakePods{}, Policy: allowAll})
	if err != nil {
		t.Fatal(err)
	}
	recs := records{
		"p1": {UID: "p1", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Redirection: "nftables/v1 ipv4"},
		"p2": {UID: "p2", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")}},
	}
	d.Lead(Node{State: func() meshready.State { return meshready.State{Ready: true} }, Records: recs})
	ctx := context.Background()
	device := func() resourceapi.AllocatedDeviceStatus {
		t.Helper()
		rc, err := client.ResourceV1().ResourceClaims("app").Get(ctx, "mesh", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rc.Status.Devices) != 1 {
			t.Fatalf("status.devices: %+v, want one entry", rc.Status.Devices)
		}
		return rc.Status.Devices[0]
	}

	if err := d.status.write(ctx, claimReport{claim: "c1", pod: enroll.PodRef{UID: "p1"}, status: enroll.RedirectionEnabled}); err != nil {
		t.Fatal(err)
	}
	st := device()
	if st.Driver != DefaultDriverName || st.Pool != testNode || st.Device != DeviceName || st.ShareID == nil || *st.ShareID != string(share) {
		t.Fatalf("device status names %+v, want the allocated share", st)
	}
	if len(st.Conditions) != 1 || st.Conditions[0].Type != ConditionEnrolled || st.Conditions[0].Status != metav1.ConditionTrue ||
		st.Conditions[0].ObservedGeneration != 3 {
		t.Fatalf("conditions %+v, want Enrolled=True at generation 3", st.Conditions)
	}
	if st.NetworkData == nil || len(st.NetworkData.IPs) != 3 || st.NetworkData.IPs[0] != "10.0.0.1/32" || st.NetworkData.IPs[2] != "fd00::2/128" {
		t.Fatalf("network data %+v, want both pods' addresses as single-address prefixes", st.NetworkData)
	}

	delete(recs, "p1") // p1 leaves: p2 still enrolled
	if err := d.status.write(ctx, claimReport{claim: "c1", pod: enroll.PodRef{UID: "p1"}, status: enroll.RedirectionRemoved}); err != nil {
		t.Fatal(err)
	}
	if st := device(); st.Conditions[0].Status != metav1.ConditionTrue || len(st.NetworkData.IPs) != 2 {
		t.Fatalf("after one of two pods left: %+v, want still Enrolled with the other's addresses", st)
	}

	delete(recs, "p2")
	if err := d.status.write(ctx, claimReport{claim: "c1", pod: enroll.PodRef{UID: "p2"}, status: enroll.RedirectionRemoved}); err != nil {
		t.Fatal(err)
	}
	if st := device(); st.Conditions[0].Status != metav1.ConditionFalse || st.Conditions[0].Reason != "NotEnrolled" || st.NetworkData != nil {
		t.Fatalf("after every pod left: %+v, want Enrolled=False and no network data", st)
	}

	if _, err := store.Remove("c1"); err != nil {
		t.Fatal(err)
	}
	if err := d.status.write(ctx, claimReport{claim: "c1", pod: enroll.PodRef{UID: "p2"}, status: enroll.RedirectionEnabled}); err != nil {
		t.Fatalf("a report for an unprepared claim: %v, want nothing done", err)
	}
}
