package kube

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The watchers cache every pod of the node and every namespace; a pod as
// the API server sends it is mostly what meshlet never reads (its
// containers, volumes, conditions, managed fields). The informers keep
// only what meshlet reads, so the cache grows by a few hundred bytes per
// pod rather than several KiB. What is kept is listed here, next to its
// readers: a field read from a cached pod must be kept here too.

// lastApplied is kubectl's copy of a whole object in an annotation, as
// big as the manifest; meshlet reads no annotation of kubectl's.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// trimPod keeps of a pod: its identity and labels and annotations
// (policy, settings, the status meshlet writes; Resolve, infoOf), whether
// it is being deleted (LookupPod), its owners, its node, service account,
// host networking and runtime class (infoOf, isPod, LookupPod), its claims
// (claimNames) and its phase.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone: left as it is
	}
	return &corev1.Pod{
		ObjectMeta: trimMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName:           p.Spec.NodeName,
			ServiceAccountName: p.Spec.ServiceAccountName,
			HostNetwork:        p.Spec.HostNetwork,
			RuntimeClassName:   p.Spec.RuntimeClassName,
			ResourceClaims:     p.Spec.ResourceClaims,
		},
		Status: corev1.PodStatus{
			Phase:                       p.Status.Phase,
			ResourceClaimStatuses:       p.Status.ResourceClaimStatuses,
			ExtendedResourceClaimStatus: p.Status.ExtendedResourceClaimStatus,
		},
	}, nil
}

// trimNamespace keeps of a namespace its identity and labels (the
// selectors meshlet matches).
func trimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, UID: ns.UID,
		ResourceVersion: ns.ResourceVersion, Labels: ns.Labels, DeletionTimestamp: ns.DeletionTimestamp}}, nil
}

// trimMeta is an object's metadata without its managed fields and
// kubectl's last-applied copy.
func trimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	annotations := m.Annotations
	if _, ok := annotations[lastApplied]; ok {
		annotations = make(map[string]string, len(m.Annotations)-1)
		for k, v := range m.Annotations {
			if k != lastApplied {
				annotations[k] = v
			}
		}
	}
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		Labels: m.Labels, Annotations: annotations, OwnerReferences: m.OwnerReferences,
	}
}
