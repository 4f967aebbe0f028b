package draplugin

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/meshlet/meshlet/agent/meshready"
)

// deviceNames are the devices of the node's pool: the shared `mesh`, or
// mesh-0 … mesh-<N-1> with --dra-slots.
func (d *Driver) deviceNames() []string {
	if d.cfg.Slots == 0 {
		return []string{DeviceName}
	}
	names := make([]string, d.cfg.Slots)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", DeviceName, i)
	}
	return names
}

// resources is the node's pool: one slice, its devices tainted NoSchedule
// while the node cannot enroll, with ipv6 (the node's IPv6 setting) as an
// attribute. The shared device has no capacity, so a
// request without an amount takes a share of nothing instead of all of it.
func (d *Driver) resources(state meshready.State, ipv6 bool) resourceslice.DriverResources {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"version":         {StringValue: ptr.To(d.deps.Version)},
		"redirectBackend": {StringValue: ptr.To(d.deps.RedirectBackend)},
		"ipv6":            {BoolValue: ptr.To(ipv6)},
	}
	var taints []resourceapi.DeviceTaint
	if !state.Ready {
		taints = []resourceapi.DeviceTaint{{Key: TaintKey(d.cfg.DriverName), Value: state.Reason, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	var devices []resourceapi.Device
	for _, name := range d.deviceNames() {
		dev := resourceapi.Device{Name: name, Attributes: attrs, Taints: taints}
		if d.cfg.Slots == 0 {
			dev.AllowMultipleAllocations = ptr.To(true)
		}
		devices = append(devices, dev)
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.deps.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
}

// healthTimeout is how long the kubelet trusts a health report; reports
// are re-sent at a third of it.
const healthTimeout = 30 * time.Second

// WatchHealthStatus reports the devices Healthy while the node can enroll
// pods (runtime hook connected, ztunnel connected) and Unhealthy
// otherwise, at once on every change and again before the kubelet's
// report would go stale.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	// The kubelet opens this stream as it registers the plugin, when its
	// ResourceHealthStatus feature is on (beta, on by default since 1.36):
	// there, the sign that it will send this meshlet the node's claims.
	logger := klog.FromContext(ctx)
	logger.Info("The kubelet watches the mesh device's health: it has registered this plugin", "driver", d.cfg.DriverName)
	defer logger.V(2).Info("The kubelet stopped watching the mesh device's health", "driver", d.cfg.DriverName)
	// A meshlet that does not serve the node yet (an update's new one)
	// cannot vouch for the devices: Unknown until it does.
	for !d.leads() {
		if !d.sendHealth(ctx, reports, kubeletplugin.HealthStatusUnknown, "another meshlet serves this node") {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.leading:
		case <-time.After(healthTimeout / 3):
		}
	}
	for {
		state, changed := d.watchState()
		health, msg := kubeletplugin.HealthStatusHealthy, "the node enrolls pods"
		if !state.Ready {
			health, msg = kubeletplugin.HealthStatusUnhealthy, state.Message
		}
		if !d.sendHealth(ctx, reports, health, msg) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(healthTimeout / 3):
		}
	}
}

// sendHealth reports every device with one health; false when ctx ended
// first.
func (d *Driver) sendHealth(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport, health kubeletplugin.HealthStatus, msg string) bool {
	var report kubeletplugin.DeviceHealthReport
	now := time.Now()
	for _, name := range d.deviceNames() {
		report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{PoolName: d.deps.NodeName, DeviceName: name,
			Health: health, LastUpdated: now, HealthCheckTimeout: healthTimeout, Message: msg})
	}
	select {
	case <-ctx.Done():
		return false
	case reports <- report:
		return true
	}
}
