// Package wire will hold the plugin↔agent Unix socket protocol of the CNI
// fallback. Standard library only, to keep the CNI binary small.
package wire
