// Package agent is meshlet's composition root: one Config (each part
// registers its own flags, each with a MESHLET_* environment variable for
// the DaemonSet), the wiring of the core to its adapters (run.go), and the
// daemon's components with their shutdown order (lifecycle.go). Only
// cmd/meshlet imports it.
package agent
