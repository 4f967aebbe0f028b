// Package agent is meshlet's composition root: one Config (flags, each with
// a MESHLET_* environment variable for the DaemonSet), the wiring of the
// core to its adapters, and the daemon's lifecycle and ordered shutdown.
package agent
