// Package claimstore keeps the mesh ResourceClaims meshlet's DRA driver
// prepared: which pods each is for, the mesh settings it gives them and its
// allocated devices, in a versioned file in the state directory
// (claims.json), written atomically before Prepare returns and shared by
// the two meshlets of a rolling update. It is its own package, without the
// kubelet plugin's dependencies (client-go, the DRA helper, gRPC): its
// parser of a file on disk is fuzzed, and the fuzzer's cost per input
// grows with the coverage of everything the test links
// (imports_test.go keeps them out).
package claimstore
