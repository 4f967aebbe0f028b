package draplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/draplugin/apis/v1alpha1"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// PrepareResourceClaims validates each claim's mesh settings and the pods
// it is for, and stores the claims that pass before returning: a meshlet
// restarted between Prepare and the pod's sandbox still has them. A
// refused claim gets an error naming the field or the conflict, which the
// kubelet shows in the pod's events; nothing of it is stored.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	logger := klog.FromContext(ctx)
	if d.deps.ObservePrepare != nil {
		defer func(start time.Time) { d.deps.ObservePrepare(time.Since(start)) }(time.Now())
	}
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var prepared []claimstore.Claim
	var pods []string
	for _, rc := range claims {
		c, devices, err := d.prepare(ctx, rc)
		if err != nil {
			if !errors.Is(err, errLookup) {
				d.Refused.Add(1)
			}
			logger.Info("Mesh claim refused", "claim", klog.KObj(rc), "claimUID", rc.UID, "err", err)
			result[rc.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("meshlet: claim %s/%s: %w", rc.Namespace, rc.Name, err)}
			continue
		}
		prepared = append(prepared, c)
		pods = append(pods, c.Pods...)
		result[rc.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	if len(prepared) == 0 {
		return result, nil
	}
	if err := d.deps.Claims.Put(prepared...); err != nil {
		// The kubelet retries the whole call.
		return nil, fmt.Errorf("store prepared claims: %w", err)
	}
	for _, c := range prepared {
		logger.V(2).Info("Mesh claim prepared", "claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID, "pods", c.Pods, "settings", settingsString(c.Settings))
	}
	// A standby has no pods to converge: the leading meshlet's runtime
	// hook reads the stored claims.
	if d.leads() && d.node.Prepared != nil {
		go d.node.Prepared(pods)
	}
	return result, nil
}

// errLookup marks a Prepare failure that is not a refusal: the pod could
// not be looked up (the API server did not answer); the kubelet retries.
var errLookup = errors.New("lookup failed")

// prepare checks one claim and returns what to store and the devices of
// the kubelet's result.
func (d *Driver) prepare(ctx context.Context, rc *resourceapi.ResourceClaim) (claimstore.Claim, []kubeletplugin.Device, error) {
	c := claimstore.Claim{UID: string(rc.UID), Namespace: rc.Namespace, Name: rc.Name}
	alloc := rc.Status.Allocation
	if alloc == nil {
		return c, nil, errors.New("not allocated")
	}
	var devices []kubeletplugin.Device
	requests := map[string]bool{}
	for _, r := range alloc.Devices.Results {
		if r.Driver != d.cfg.DriverName {
			continue
		}
		dev := kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, ShareID: r.ShareID}
		if d.cfg.Gate.Enabled {
			dev.CDIDeviceIDs = []string{d.cfg.CDIDeviceID()}
		}
		ad := claimstore.AllocatedDevice{Request: r.Request, Pool: r.Pool, Device: r.Device}
		if r.ShareID != nil {
			ad.ShareID = string(*r.ShareID)
		}
		if r.Pool != d.deps.NodeName {
			return c, nil, fmt.Errorf("device %s/%s is not this node's (%s)", r.Pool, r.Device, d.deps.NodeName)
		}
		devices = append(devices, dev)
		c.Devices = append(c.Devices, ad)
		requests[r.Request] = true
	}
	settings, err := d.claimSettings(alloc, requests)
	if err != nil {
		return c, nil, err
	}
	c.Settings = settings
	for _, ref := range rc.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			continue
		}
		pod, info, found, err := d.deps.Pods.LookupPod(ctx, rc.Namespace, ref.Name, string(ref.UID))
		if err != nil {
			return c, nil, fmt.Errorf("pod %s/%s: %w: %w", rc.Namespace, ref.Name, errLookup, err)
		}
		if !found {
			continue // still listed, but gone or going: not a pod to mesh
		}
		if err := d.deps.Policy.ClaimConflict(&pod, info); err != nil {
			return c, nil, fmt.Errorf("pod %s/%s cannot be meshed, so it must not ask for the mesh: %w", rc.Namespace, ref.Name, err)
		}
		c.Pods = append(c.Pods, string(ref.UID))
	}
	if len(c.Pods) == 0 {
		return c, nil, errors.New("reserved for no running pod")
	}
	return c, devices, nil
}

// claimSettings merges the driver's opaque configurations that apply to
// its requests: the device class's first, then the claim's, so the claim
// wins field by field. Every invalid configuration is reported, each with
// its path.
func (d *Driver) claimSettings(alloc *resourceapi.AllocationResult, requests map[string]bool) (v1alpha1.MeshConfig, error) {
	merged := v1alpha1.MeshConfig{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.Kind}
	var errs []error
	classIdx, claimIdx := 0, 0
	for _, source := range []resourceapi.AllocationConfigSource{resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim} {
		for _, cfg := range alloc.Devices.Config {
			if cfg.Source != source {
				continue
			}
			var path string
			if source == resourceapi.AllocationConfigSourceClass {
				path = fmt.Sprintf("deviceClass.config[%d].opaque.parameters", classIdx)
				classIdx++
			} else {
				path = fmt.Sprintf("spec.devices.config[%d].opaque.parameters", claimIdx)
				claimIdx++
			}
			if cfg.Opaque == nil || cfg.Opaque.Driver != d.cfg.DriverName || !appliesTo(cfg.Requests, requests) {
				continue
			}
			mc, err := v1alpha1.Decode(cfg.Opaque.Parameters.Raw, path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if mc.DNSCapture != nil {
				merged.DNSCapture = mc.DNSCapture
			}
			if mc.InboundCapture != nil {
				merged.InboundCapture = mc.InboundCapture
			}
		}
	}
	if len(errs) > 0 {
		return merged, fmt.Errorf("invalid %s %s: %w", v1alpha1.GroupVersion, v1alpha1.Kind, errors.Join(errs...))
	}
	return merged, nil
}

// appliesTo reports whether a configuration for the named requests (all
// when empty; a main request covers its subrequests) applies to one of
// ours.
func appliesTo(names []string, ours map[string]bool) bool {
	if len(names) == 0 {
		return true
	}
	for req := range ours {
		main, _, _ := strings.Cut(req, "/")
		if slices.Contains(names, req) || slices.Contains(names, main) {
			return true
		}
	}
	return false
}

// settingsString is a claim's settings for logs.
func settingsString(c v1alpha1.MeshConfig) string {
	var parts []string
	if c.DNSCapture != nil {
		parts = append(parts, fmt.Sprintf("dnsCapture=%t", *c.DNSCapture))
	}
	if c.InboundCapture != nil {
		parts = append(parts, fmt.Sprintf("inboundCapture=%t", *c.InboundCapture))
	}
	if len(parts) == 0 {
		return "node defaults"
	}
	return strings.Join(parts, ",")
}

// UnprepareResourceClaims forgets the claims. It is idempotent and works
// for claims this process never saw (another meshlet prepared them, or
// none did).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	uids := make([]string, 0, len(claims))
	result := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		uids = append(uids, string(c.UID))
		result[c.UID] = nil
	}
	removed, err := d.deps.Claims.Remove(uids...)
	if err != nil {
		return nil, fmt.Errorf("remove prepared claims: %w", err)
	}
	for _, c := range removed {
		klog.FromContext(ctx).V(2).Info("Mesh claim unprepared", "claim", klog.KRef(c.Namespace, c.Name), "claimUID", c.UID, "pods", c.Pods)
	}
	return result, nil
}
