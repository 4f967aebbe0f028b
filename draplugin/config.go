package draplugin

import (
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Names users and manifests see.
const (
	// DefaultDriverName is the driver's name in DeviceClasses, slices and claims.
	DefaultDriverName = "mesh.meshlet.dev"
	// DeviceName is the shared device every mesh pod on a node gets.
	DeviceName = "mesh"
	// ConditionEnrolled is the claim device status condition meshlet sets.
	ConditionEnrolled = "Enrolled"
	// MaxSlots is the most plain devices one slice holds.
	MaxSlots = 128
)

// TaintKey is the key of the taint on the driver's devices while the node
// cannot enroll pods: "<driver>/not-ready".
func TaintKey(driverName string) string { return driverName + "/not-ready" }

// Config is the kubelet plugin's configuration.
type Config struct {
	// Enabled turns the plugin on.
	Enabled bool
	// DriverName is the DRA driver name (a DNS subdomain).
	DriverName string
	// KubeletRootDir is the kubelet's --root-dir: the plugin's socket goes
	// in plugins/<driver>/, its registration in plugins_registry/.
	KubeletRootDir string
	// Slots, when more than 0, publishes that many plain devices instead
	// of one shared device (for clusters where DRAConsumableCapacity is
	// off): at most Slots mesh pods per node.
	Slots int
	// PodUID is meshlet's own pod UID. Set (DaemonSet: downward API), it
	// enables the kubelet's rolling-update registration (a socket per
	// pod), so that whenever two meshlets run on the node both serve the
	// driver and neither removes the other's registration.
	PodUID string
	// Gate is the container gate on the mesh device.
	Gate GateConfig
}

// DefaultConfig is on, with the default driver name and kubelet root.
func DefaultConfig() Config {
	return Config{Enabled: true, DriverName: DefaultDriverName, KubeletRootDir: "/var/lib/kubelet", Gate: DefaultGateConfig()}
}

// Validate reports the first setting that cannot work, naming its flag.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(c.DriverName); len(errs) > 0 {
		return fmt.Errorf("--dra-driver-name=%q: %s", c.DriverName, errs[0])
	}
	if len(c.DriverName) > 63 {
		return fmt.Errorf("--dra-driver-name=%q: at most 63 characters", c.DriverName)
	}
	if c.KubeletRootDir == "" || !filepath.IsAbs(c.KubeletRootDir) {
		return fmt.Errorf("--kubelet-root-dir=%q: want an absolute path (the kubelet's --root-dir)", c.KubeletRootDir)
	}
	if c.Slots < 0 || c.Slots > MaxSlots {
		return fmt.Errorf("--dra-slots=%d: want 0 (one shared device) to %d", c.Slots, MaxSlots)
	}
	if c.PodUID != "" {
		if errs := validation.IsValidLabelValue(c.PodUID); len(errs) > 0 || len(c.PodUID) > 63 {
			return fmt.Errorf("--pod-uid=%q: not a pod UID (DaemonSet: from the downward API, metadata.uid)", c.PodUID)
		}
	}
	if err := c.Gate.Validate(); err != nil {
		return err
	}
	return c.validateCDIVendor()
}

// registryDir is where the kubelet looks for plugin registrations.
func (c Config) registryDir() string { return filepath.Join(c.KubeletRootDir, "plugins_registry") }

// dataDir holds the plugin's DRA socket and the lock two meshlets share
// during a rolling update.
func (c Config) dataDir() string { return filepath.Join(c.KubeletRootDir, "plugins", c.DriverName) }
