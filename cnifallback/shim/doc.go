// Package shim is the logic of meshlet-cni, the chained CNI plugin of the
// CNI fallback: it forwards ADD, DEL and CHECK to the meshlet agent over
// its Unix socket (cnifallback/wire) and passes the previous plugin's
// result through unchanged. It decides nothing about the mesh itself: the
// agent's policy does. It imports only the wire protocol and the CNI
// library, so the plugin binary stays small.
package shim
