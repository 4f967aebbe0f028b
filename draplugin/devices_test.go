package draplugin

import (
	"context"
	"reflect"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/meshlet/meshlet/agent/meshready"
)

func newSlotsDriver(t *testing.T, slots int, state meshready.State) *Driver {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Slots = slots
	d, err := New(cfg, Deps{
		Client: fake.NewClientset(), NodeName: testNode, Claims: openStore(t, t.TempDir()),
		Pods: &fakePods{}, Policy: allowAll,
		Version: "v1.2.3", RedirectBackend: "nftables", IPv6: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.Lead(Node{State: func() meshready.State { return state }, Records: noRecords{}})
	d.setState(state) // what Run does first once it leads
	return d
}

func poolDevices(t *testing.T, r resourceslice.DriverResources) []resourceapi.Device {
	t.Helper()
	if len(r.Pools) != 1 {
		t.Fatalf("%d pools, want 1", len(r.Pools))
	}
	pool, ok := r.Pools[testNode]
	if !ok {
		t.Fatalf("pools %v, want one named after the node", r.Pools)
	}
	if len(pool.Slices) != 1 {
		t.Fatalf("%d slices, want 1", len(pool.Slices))
	}
	return pool.Slices[0].Devices
}

func TestResources(t *testing.T) {
	wantAttrs := func(t *testing.T, dev resourceapi.Device) {
		t.Helper()
		a := dev.Attributes
		if len(a) != 3 || a["version"].StringValue == nil || *a["version"].StringValue != "v1.2.3" ||
			a["redirectBackend"].StringValue == nil || *a["redirectBackend"].StringValue != "nftables" ||
			a["ipv6"].BoolValue == nil || !*a["ipv6"].BoolValue {
			t.Errorf("device %s attributes %+v, want version v1.2.3, redirectBackend nftables, ipv6 true", dev.Name, a)
		}
		if dev.Capacity != nil {
			t.Errorf("device %s has capacity %+v; a request without an amount would take all of it", dev.Name, dev.Capacity)
		}
	}

	t.Run("shared device", func(t *testing.T) {
		d := newSlotsDriver(t, 0, meshready.State{Ready: true})
		devs := poolDevices(t, d.resources(meshready.State{Ready: true}, true))
		if len(devs) != 1 || devs[0].Name != "mesh" {
			t.Fatalf("devices %+v, want just mesh", devs)
		}
		if devs[0].AllowMultipleAllocations == nil || !*devs[0].AllowMultipleAllocations {
			t.Error("shared device does not allow multiple allocations")
		}
		wantAttrs(t, devs[0])
		if len(devs[0].Taints) != 0 {
			t.Errorf("ready node's device tainted: %+v", devs[0].Taints)
		}
	})

	t.Run("slots", func(t *testing.T) {
		d := newSlotsDriver(t, 3, meshready.State{Ready: true})
		devs := poolDevices(t, d.resources(meshready.State{Ready: true}, true))
		var names []string
		for _, dev := range devs {
			names = append(names, dev.Name)
			if dev.AllowMultipleAllocations != nil {
				t.Errorf("slot %s has AllowMultipleAllocations %v", dev.Name, *dev.AllowMultipleAllocations)
			}
			wantAttrs(t, dev)
			if len(dev.Taints) != 0 {
				t.Errorf("ready node's slot %s tainted", dev.Name)
			}
		}
		if want := []string{"mesh-0", "mesh-1", "mesh-2"}; !reflect.DeepEqual(names, want) {
			t.Errorf("devices %v, want %v", names, want)
		}
	})

	t.Run("not ready taints every device", func(t *testing.T) {
		for _, slots := range []int{0, 2} {
			d := newSlotsDriver(t, slots, meshready.State{Ready: true})
			state := meshready.State{Reason: "ztunnel-disconnected", Message: "no ztunnel is connected"}
			devs := poolDevices(t, d.resources(state, true))
			if len(devs) != max(slots, 1) {
				t.Fatalf("slots %d: %d devices", slots, len(devs))
			}
			want := []resourceapi.DeviceTaint{{Key: "mesh.meshlet.dev/not-ready", Value: "ztunnel-disconnected", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
			for _, dev := range devs {
				if !reflect.DeepEqual(dev.Taints, want) {
					t.Errorf("slots %d: device %s taints %+v, want %+v", slots, dev.Name, dev.Taints, want)
				}
			}
		}
	})
}

func recvReport(t *testing.T, reports <-chan kubeletplugin.DeviceHealthReport, within time.Duration) kubeletplugin.DeviceHealthReport {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(within):
		t.Fatalf("no health report within %v", within)
		return kubeletplugin.DeviceHealthReport{}
	}
}

func TestWatchHealthStatus(t *testing.T) {
	d := newSlotsDriver(t, 0, meshready.State{Ready: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()

	r := recvReport(t, reports, 2*time.Second)
	if len(r.Devices) != 1 {
		t.Fatalf("initial report %+v, want one device", r)
	}
	h := r.Devices[0]
	if h.PoolName != testNode || h.DeviceName != "mesh" || h.Health != kubeletplugin.HealthStatusHealthy || h.HealthCheckTimeout != 30*time.Second || h.LastUpdated.IsZero() {
		t.Errorf("initial report %+v, want mesh Healthy with a 30s timeout", h)
	}

	// A change is reported at once, not at the next 10s re-send.
	start := time.Now()
	d.setState(meshready.State{Reason: "runtime-hook-disconnected", Message: "meshlet is not connected to the container runtime"})
	r = recvReport(t, reports, 2*time.Second)
	if el := time.Since(start); el > time.Second {
		t.Errorf("change reported after %v", el)
	}
	h = r.Devices[0]
	if h.Health != kubeletplugin.HealthStatusUnhealthy || h.Message != "meshlet is not connected to the container runtime" {
		t.Errorf("report after the change %+v, want Unhealthy with the state's message", h)
	}

	// Back to ready.
	d.setState(meshready.State{Ready: true})
	if h := recvReport(t, reports, 2*time.Second).Devices[0]; h.Health != kubeletplugin.HealthStatusHealthy {
		t.Errorf("report after recovery %+v, want Healthy", h)
	}

	// Cancelled while waiting for a change, and (below) while blocked
	// sending: returns nil promptly either way.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchHealthStatus returned %v, want nil", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WatchHealthStatus did not return after cancel")
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- d.WatchHealthStatus(ctx2, make(chan kubeletplugin.DeviceHealthReport)) }()
	time.Sleep(20 * time.Millisecond)
	cancel2()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchHealthStatus returned %v, want nil", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WatchHealthStatus blocked on an unread channel after cancel")
	}
}

// TestWatchHealthStatusSlots: every slot is in every report.
func TestWatchHealthStatusSlots(t *testing.T) {
	d := newSlotsDriver(t, 3, meshready.State{Reason: "ztunnel-disconnected", Message: "no ztunnel"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	go func() { _ = d.WatchHealthStatus(ctx, reports) }()
	r := recvReport(t, reports, 2*time.Second)
	var names []string
	for _, h := range r.Devices {
		names = append(names, h.DeviceName)
		if h.Health != kubeletplugin.HealthStatusUnhealthy || h.Message != "no ztunnel" || h.PoolName != testNode {
			t.Errorf("%+v, want Unhealthy, no ztunnel", h)
		}
	}
	if want := []string{"mesh-0", "mesh-1", "mesh-2"}; !reflect.DeepEqual(names, want) {
		t.Errorf("report covers %v, want %v", names, want)
	}
}
