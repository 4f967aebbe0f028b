package draplugin

import (
	"flag"
)

// AddFlags registers the DRA kubelet plugin and the container gate settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enabled, "dra", c.Enabled, "serve the DRA kubelet plugin: pods ask for the mesh with a ResourceClaim or the extended resource (off with --standalone)")
	fs.StringVar(&c.DriverName, "dra-driver-name", c.DriverName, "DRA driver name of the mesh device (DeviceClass selector, claims' opaque config)")
	fs.StringVar(&c.KubeletRootDir, "kubelet-root-dir", c.KubeletRootDir, "the kubelet's --root-dir: the DRA plugin registers in its plugins_registry/ and serves from plugins/<driver>/")
	fs.IntVar(&c.Slots, "dra-slots", c.Slots, "publish this many plain mesh devices instead of one shared device, for clusters without the DRAConsumableCapacity feature (at most that many mesh pods per node; 0: one shared device)")
	fs.StringVar(&c.PodUID, "pod-uid", c.PodUID, "meshlet's own pod UID (DaemonSet: downward API metadata.uid); enables the DRA plugin's rolling-update registration")
	fs.BoolVar(&c.Gate.Enabled, "gate", c.Gate.Enabled, "with --dra: add the container gate to the mesh device, a CDI createRuntime hook (meshlet-gate) that refuses each container that asked for the mesh (through the claim or the extended resource) while meshlet has not enrolled its pod; off, meshlet still answers the hook of pods prepared while it was on")
	fs.StringVar(&c.Gate.CDISpecDir, "cdi-spec-dir", c.Gate.CDISpecDir, "with --gate: one of the runtime's CDI spec directories; the gate's spec is written there")
	fs.StringVar(&c.Gate.HookDir, "gate-hook-dir", c.Gate.HookDir, "with --gate: the host directory meshlet copies meshlet-gate into; the runtime runs the hook from there")
	fs.StringVar(&c.Gate.HookBinary, "gate-hook-binary", c.Gate.HookBinary, "with --gate: the meshlet-gate binary to copy (default: meshlet-gate next to the meshlet executable)")
	fs.StringVar(&c.Gate.Socket, "gate-socket", c.Gate.Socket, "with --gate: the Unix socket meshlet-gate asks")
	fs.DurationVar(&c.Gate.Timeout, "gate-timeout", c.Gate.Timeout, "with --gate: how long meshlet-gate waits for meshlet's answer before it refuses the container")
}
