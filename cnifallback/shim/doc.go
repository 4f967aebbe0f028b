// Package shim will hold the CNI plugin logic of meshlet-cni: parse the
// chained config, forward ADD/DEL/CHECK to the agent, pass prevResult
// through unchanged.
package shim
