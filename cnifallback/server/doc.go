// Package server is the agent's side of the CNI fallback: it serves
// meshlet-cni's requests (cnifallback/wire) on a Unix socket only root may
// use, and turns an ADD or CHECK into the same Enroll the NRI hook calls,
// and a DEL into Forget.
package server
