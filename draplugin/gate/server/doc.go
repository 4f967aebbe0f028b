// Package server is meshlet's side of the container gate: it answers the
// meshlet-gate hook from the enrollment core's view. A container may
// start only if an enrolled pod holds its network namespace (and, when
// the runtime names the pod, that pod is the one enrolled there).
package server
