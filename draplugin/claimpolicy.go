package draplugin

import (
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// ClaimPolicy makes a pod with a prepared mesh claim must-mesh: the claim
// selects it whatever its labels say. Other pods are decided by labels.
type ClaimPolicy struct {
	labels LabelPolicy
	claims *claimstore.Store
}

// LabelPolicy is the node's policy by labels (agent/policy), as
// ClaimPolicy defers to it.
type LabelPolicy interface {
	enroll.Policy
	Eligibility
	// DecideClaimed decides a pod that holds a mesh claim.
	DecideClaimed(pod *enroll.Pod, info enroll.PodInfo) enroll.Decision
}

var _ enroll.Policy = ClaimPolicy{}

// NewClaimPolicy decides pods by their prepared claims, then by labels.
func NewClaimPolicy(labels LabelPolicy, claims *claimstore.Store) ClaimPolicy {
	return ClaimPolicy{labels: labels, claims: claims}
}

// Decide is the core's Policy port.
func (p ClaimPolicy) Decide(pod *enroll.Pod, info enroll.PodInfo) enroll.Decision {
	switch {
	case p.claims.Claimed(pod.UID):
		// Prepared for this pod: Prepare refused it if it could not hold
		// the claim.
		return p.labels.DecideClaimed(pod, info)
	case len(p.claims.Of(pod, info)) > 0 && p.labels.ClaimConflict(pod, info) == nil:
		// It joined a shared claim after the kubelet prepared it (the
		// kubelet prepares a claim once), so no Prepare checked it here; a
		// pod that could not hold the claim is decided by its labels.
		return p.labels.DecideClaimed(pod, info)
	}
	return p.labels.Decide(pod, info)
}
