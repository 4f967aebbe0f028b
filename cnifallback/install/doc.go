// Package install will chain meshlet-cni into the node's CNI conflist,
// re-assert it when the primary CNI rewrites the file, and remove it
// cleanly.
package install
