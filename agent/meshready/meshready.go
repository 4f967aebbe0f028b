// Package meshready says whether the node's mesh can take new pods: the
// runtime's hook is in place and a ztunnel is connected. The DRA device's
// taint and health and the node's own taint (or condition) publish it.
package meshready

// Reasons of a node whose mesh cannot take new pods: the value of the
// taints that say so.
const (
	ReasonRuntime = "runtime-hook-disconnected"
	ReasonZtunnel = "ztunnel-disconnected"
	ReasonStopped = "meshlet-stopped"
)

// State is whether new pods can be enrolled now. Reason is a short token
// (a label value, used in taints); Message is for people.
type State struct {
	Ready   bool
	Reason  string
	Message string
}

// Stopped is the node's state once its meshlet stopped.
var Stopped = State{Reason: ReasonStopped, Message: "meshlet stopped: the node enrolls no new pods until a meshlet serves it again"}

// Of is whether new pods can be enrolled: the runtime's hook (NRI, or CNI
// mode's chained plugin) is in place and a ztunnel is connected to hand
// them to.
func Of(runtimeConnected func() bool, ztunnels func() int, ztunnelSocket string) func() State {
	return func() State {
		switch {
		case !runtimeConnected():
			return State{Reason: ReasonRuntime, Message: "meshlet's runtime hook is not in place (NRI not connected, or in CNI mode meshlet-cni not chained and served): pods would not be enrolled"}
		case ztunnels() == 0:
			return State{Reason: ReasonZtunnel, Message: "no ztunnel is connected to " + ztunnelSocket + ": pods cannot be handed to the mesh"}
		}
		return State{Ready: true}
	}
}
