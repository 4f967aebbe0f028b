// Package claimstore keeps the mesh ResourceClaims meshlet's DRA driver
// prepared: which pods each is for, the mesh settings it gives them and its
// allocated devices, in a versioned file in the state directory
// (claims.json), written atomically before Prepare returns and shared by
// the two meshlets of a rolling update. It is its own package, with the
// enrollment core's types as its only meshlet dependency, so that its
// parser of a file on disk is fuzzed without the kubelet plugin's
// dependency graph.
package claimstore
