package kube

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// fullPod is a pod as the API server sends it: containers, volumes,
// status, managed fields and kubectl's last-applied copy besides what
// meshlet reads.
func fullPod() *corev1.Pod {
	claim, class := "mesh-claim", "kata"
	now := metav1.Now()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "bookinfo", UID: types.UID("uid-1"), ResourceVersion: "42",
			Labels:            map[string]string{"app": "reviews", "istio.io/dataplane-mode": "ambient"},
			Annotations:       map[string]string{lastApplied: `{"big":"manifest"}`, "ambient.istio.io/redirection": "enabled"},
			OwnerReferences:   []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "reviews-1", UID: "rs"}},
			DeletionTimestamp: &now,
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
		},
		Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "bookinfo-reviews", HostNetwork: true, RuntimeClassName: &class,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "mesh", ResourceClaimName: &claim}},
			Containers:     []corev1.Container{{Name: "app", Image: "reviews:v1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
			Volumes:        []corev1.Volume{{Name: "token"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}},
			Conditions:                  []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ResourceClaimStatuses:       []corev1.PodResourceClaimStatus{{Name: "tmpl", ResourceClaimName: &claim}},
			ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "ext"}},
	}
}

// TestTrimPodKeepsWhatMeshletReads: a trimmed pod gives the same policy
// inputs and lookup answers as the whole one, without what meshlet never
// reads.
func TestTrimPodKeepsWhatMeshletReads(t *testing.T) {
	full := fullPod()
	obj, err := trimPod(full)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*corev1.Pod)
	w := &Watcher{cfg: WatcherConfig{NodeName: "node-1"},
		nsList: corelisters.NewNamespaceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))}
	if got, want := w.infoOf(trimmed, "bookinfo"), w.infoOf(full, "bookinfo"); !reflect.DeepEqual(got.PodLabels, want.PodLabels) ||
		got.ServiceAccount != want.ServiceAccount || !reflect.DeepEqual(got.ResourceClaims, want.ResourceClaims) ||
		*got.HostNetwork != *want.HostNetwork {
		t.Fatalf("policy inputs differ: trimmed %+v, whole %+v", got, want)
	}
	if _, ok := trimmed.Annotations[lastApplied]; ok {
		t.Error("kubectl's last-applied copy kept")
	}
	if trimmed.Annotations["ambient.istio.io/redirection"] != "enabled" {
		t.Error("meshlet's status annotation dropped")
	}
	if _, ok := full.Annotations[lastApplied]; !ok {
		t.Error("the informer's object was changed in place")
	}
	if trimmed.DeletionTimestamp == nil || trimmed.Spec.RuntimeClassName == nil || *trimmed.Spec.RuntimeClassName != "kata" ||
		trimmed.Status.Phase != corev1.PodRunning || len(trimmed.OwnerReferences) != 1 || trimmed.ResourceVersion != "42" {
		t.Errorf("a field meshlet reads was dropped: %+v", trimmed)
	}
	if len(trimmed.ManagedFields) > 0 || len(trimmed.Spec.Containers) > 0 || len(trimmed.Spec.Volumes) > 0 ||
		len(trimmed.Status.Conditions) > 0 || len(trimmed.Status.PodIPs) > 0 {
		t.Errorf("unread fields kept: %+v", trimmed)
	}
	whole, _ := json.Marshal(full)
	small, _ := json.Marshal(trimmed)
	t.Logf("pod as JSON: %d bytes whole, %d trimmed", len(whole), len(small))
}

func TestTrimNamespace(t *testing.T) {
	obj, err := trimNamespace(&corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "bookinfo", UID: "ns-uid", ResourceVersion: "7", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"},
			Annotations: map[string]string{lastApplied: "{}"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bookinfo", UID: "ns-uid", ResourceVersion: "7",
		Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
	if !reflect.DeepEqual(obj, want) {
		t.Fatalf("trimmed namespace %+v, want %+v", obj, want)
	}
}

// TestTrimLeavesTombstones: a deletion the informer missed comes as a
// tombstone, passed on as it is.
func TestTrimLeavesTombstones(t *testing.T) {
	tomb := cache.DeletedFinalStateUnknown{Key: "bookinfo/reviews", Obj: fullPod()}
	for _, trim := range []cache.TransformFunc{trimPod, trimNamespace} {
		if got, err := trim(tomb); err != nil || !reflect.DeepEqual(got, tomb) {
			t.Fatalf("tombstone became %v (%v)", got, err)
		}
	}
}
