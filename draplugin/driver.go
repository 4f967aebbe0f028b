package draplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/meshready"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// PodLookup finds a pod the kubelet prepares a claim for: its facts as the
// runtime hook will see them, and what policy needs to know about it.
// found is false for a pod that is gone or being deleted.
type PodLookup interface {
	LookupPod(ctx context.Context, namespace, name, uid string) (pod enroll.Pod, info enroll.PodInfo, found bool, err error)
}

// Eligibility says why a pod must not get a mesh claim (nil: it may).
type Eligibility interface {
	ClaimConflict(pod *enroll.Pod, info enroll.PodInfo) error
}

// Deps are what the plugin talks to.
type Deps struct {
	Client   kubernetes.Interface
	NodeName string
	Claims   *claimstore.Store
	Pods     PodLookup
	Policy   Eligibility
	// Attributes of the published devices; IPv6 as meshlet starts (it
	// follows the node setting: SetIPv6).
	Version, RedirectBackend string
	IPv6                     bool
	// ObservePrepare, if set, gets the duration of each Prepare call
	// (validation and the write to disk included).
	ObservePrepare func(time.Duration)
}

// Node is the meshlet that serves the node's runtime hook and ztunnel:
// what the driver needs to publish the node's device and report claims.
type Node struct {
	// State is polled; a change is published within PollInterval.
	State func() meshready.State
	// Records gives an enrolled pod's record, for the claim's status.
	Records interface {
		Record(uid string) (enroll.Record, bool)
	}
	// Prepared is called (not on the kubelet's call path) with the pods
	// of newly prepared claims: one may already run and must converge.
	Prepared func(podUIDs []string)
}

// PollInterval bounds how long a change of the node's state takes to
// reach the device taint and health.
const PollInterval = 100 * time.Millisecond

// Driver is the kubelet plugin.
type Driver struct {
	cfg  Config
	deps Deps

	// state is the node's last seen state; changed is closed (and
	// replaced) whenever it changes.
	stateMu sync.Mutex
	state   meshready.State
	changed chan struct{}

	// ipv6 is the devices' ipv6 attribute: the node's IPv6 setting.
	ipv6 atomic.Bool

	status *claimStatus
	fail   context.CancelCauseFunc

	// Refused counts claims Prepare refused (invalid config, a pod that
	// cannot be meshed), each retry of the kubelet again.
	Refused atomic.Uint64

	// node is set once by Lead; leading is closed then.
	node    Node
	leading chan struct{}

	// helper is the running kubelet plugin (nil before Run starts it and
	// after it stops).
	helper atomic.Pointer[kubeletplugin.Helper]
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New returns the plugin; Run registers it with the kubelet.
func New(cfg Config, deps Deps) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Client == nil || deps.NodeName == "" || deps.Claims == nil || deps.Pods == nil || deps.Policy == nil {
		return nil, errors.New("draplugin: missing dependency")
	}
	d := &Driver{cfg: cfg, deps: deps, changed: make(chan struct{}), leading: make(chan struct{})}
	d.state = meshready.State{Reason: "starting", Message: "meshlet is starting"}
	d.ipv6.Store(deps.IPv6)
	d.status = newClaimStatus(d)
	return d, nil
}

// Lead makes this driver the node's: it publishes the node's device and
// reports enrollments into claims. Until then it only prepares and
// unprepares claims, which is what a new meshlet does while the previous
// one still serves the node (both are registered with the kubelet during
// a rolling update, and the kubelet may call either). Call it once.
func (d *Driver) Lead(node Node) {
	if node.State == nil || node.Records == nil {
		panic("draplugin: Lead without node state or records")
	}
	select {
	case <-d.leading:
		panic("draplugin: Lead called twice")
	default:
	}
	d.node = node
	close(d.leading)
}

// stopCause is nil when ctx was cancelled to stop, else why it ended (a
// fatal error of the helper).
func stopCause(ctx context.Context) error {
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Run registers the plugin with the kubelet, publishes the node's slice
// and keeps its taint and health current until ctx ends; then it
// unregisters. The prepared claims stay on disk for the next meshlet.
func (d *Driver) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, d.fail = context.WithCancelCause(ctx)
	var wg sync.WaitGroup // the claim status writer
	defer func() { d.fail(nil); wg.Wait() }()
	if fi, err := os.Stat(d.cfg.registryDir()); err != nil || !fi.IsDir() {
		return fmt.Errorf("kubelet plugin registry %s not found (is --kubelet-root-dir the kubelet's --root-dir?): %v", d.cfg.registryDir(), err)
	}
	if err := os.MkdirAll(d.cfg.dataDir(), 0o750); err != nil {
		return fmt.Errorf("plugin directory: %w", err)
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(d.cfg.DriverName),
		kubeletplugin.NodeName(d.deps.NodeName),
		kubeletplugin.KubeClient(d.deps.Client),
		kubeletplugin.RegistrarDirectoryPath(d.cfg.registryDir()),
		kubeletplugin.PluginDataDirectoryPath(d.cfg.dataDir()),
	}
	if d.cfg.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(d.cfg.PodUID)))
	}
	// The helper outlives ctx until Run returns: a stopping meshlet still
	// publishes its device's taint (see taintForStop).
	helper, err := kubeletplugin.Start(context.WithoutCancel(ctx), d, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin %s: %w", d.cfg.DriverName, err)
	}
	d.helper.Store(helper)
	defer func() { d.helper.Store(nil); helper.Stop() }()
	logger.Info("DRA kubelet plugin serving", "driver", d.cfg.DriverName, "pluginDir", d.cfg.dataDir(), "rollingUpdate", d.cfg.PodUID != "")
	select {
	case <-ctx.Done():
		return stopCause(ctx)
	case <-d.leading:
	}
	state := d.node.State()
	d.setState(state)
	ipv6 := d.ipv6.Load()
	if err := helper.PublishResources(ctx, d.resources(state, ipv6)); err != nil {
		return fmt.Errorf("publish ResourceSlice: %w", err)
	}
	logger.Info("Publishing the node's mesh device", "devices", d.deviceNames(), "ready", state.Ready, "reason", state.Reason)

	wg.Go(func() { d.status.run(ctx) })
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// Stopping or failing, the device is tainted first: no mesh
			// pod may be scheduled while no meshlet serves the node.
			d.taintForStop(helper, logger)
			return stopCause(ctx)
		case <-tick.C:
		}
		next := d.node.State()
		changed := d.setState(next)
		wasIPv6 := ipv6
		ipv6 = d.ipv6.Load()
		if !changed && ipv6 == wasIPv6 {
			continue
		}
		if err := helper.PublishResources(ctx, d.resources(next, ipv6)); err != nil {
			return fmt.Errorf("publish ResourceSlice: %w", err)
		}
		if ipv6 != wasIPv6 {
			logger.Info("Mesh device republished: the node's IPv6 setting changed", "driver", d.cfg.DriverName, "ipv6", ipv6)
		}
		if !changed {
			continue
		}
		if next.Ready {
			logger.Info("Mesh device untainted: the node can enroll pods", "driver", d.cfg.DriverName)
		} else {
			logger.Info("Mesh device tainted: the node cannot enroll pods", "driver", d.cfg.DriverName, "reason", next.Reason, "detail", next.Message)
		}
	}
}

// SetIPv6 sets the devices' ipv6 attribute (the node's IPv6 setting); a
// running plugin republishes the slice within PollInterval. Claims already
// allocated keep their device: the attribute only guides new allocations.
func (d *Driver) SetIPv6(on bool) { d.ipv6.Store(on) }

// Serving is nil while the kubelet plugin serves (its registration socket
// is up: the kubelet's plugin watcher registers it from there), else why
// not. The kubelet's answer itself is not read: the helper keeps it
// without synchronisation.
func (d *Driver) Serving() error {
	if d.helper.Load() == nil {
		return fmt.Errorf("DRA kubelet plugin %s not serving", d.cfg.DriverName)
	}
	return nil
}

// DeviceReady reports whether this meshlet publishes the node's mesh
// device untainted.
func (d *Driver) DeviceReady() bool { return d.leads() && d.nodeState().Ready }

// Taint is the device's taint as "key=value:NoSchedule" (what kubectl
// shows), "" while the device is untainted.
func (d *Driver) Taint() string {
	st := d.nodeState() // once: it may change meanwhile
	if d.leads() && st.Ready {
		return ""
	}
	reason := st.Reason
	if reason == "" {
		reason = "starting" // not leading yet
	}
	return TaintKey(d.cfg.DriverName) + "=" + reason + ":" + string(resourceapi.DeviceTaintEffectNoSchedule)
}

// leads reports whether Lead was called.
func (d *Driver) leads() bool {
	select {
	case <-d.leading:
		return true
	default:
		return false
	}
}

// nodeState is the last seen state.
func (d *Driver) nodeState() meshready.State {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.state
}

// watchState returns the state and a channel closed at its next change.
func (d *Driver) watchState() (meshready.State, <-chan struct{}) {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.state, d.changed
}

// setState records s and reports whether it changed.
func (d *Driver) setState(s meshready.State) bool {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	if s == d.state {
		return false
	}
	d.state = s
	close(d.changed)
	d.changed = make(chan struct{})
	return true
}

// taintForStop taints the device before the plugin goes: until another
// meshlet serves the node (an update's new one, a restart), no pod can be
// enrolled here, so the scheduler must not place mesh pods on it. It waits
// (at most a second) until the API server has the taint.
func (d *Driver) taintForStop(helper *kubeletplugin.Helper, logger klog.Logger) {
	d.setState(meshready.Stopped)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := helper.PublishResources(ctx, d.resources(meshready.Stopped, d.ipv6.Load())); err != nil {
		logger.Error(err, "Tainting the mesh device on stop")
		return
	}
	sel := fields.Set{"spec.nodeName": d.deps.NodeName, "spec.driver": d.cfg.DriverName}.AsSelector().String()
	for {
		list, err := d.deps.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil && allTainted(list.Items, TaintKey(d.cfg.DriverName), meshready.Stopped.Reason) {
			logger.Info("Mesh device tainted: meshlet is stopping", "driver", d.cfg.DriverName)
			return
		}
		select {
		case <-ctx.Done():
			logger.Info("Mesh device taint not confirmed before stopping", "driver", d.cfg.DriverName, "err", err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// allTainted reports whether the slices have devices, all carrying the
// taint key=value:NoSchedule.
func allTainted(items []resourceapi.ResourceSlice, key, value string) bool {
	n := 0
	for _, s := range items {
		for _, dev := range s.Spec.Devices {
			if !slices.ContainsFunc(dev.Taints, func(t resourceapi.DeviceTaint) bool {
				return t.Key == key && t.Value == value && t.Effect == resourceapi.DeviceTaintEffectNoSchedule
			}) {
				return false
			}
			n++
		}
	}
	return n > 0
}

// HandleError logs background errors of the helper (publishing slices,
// its gRPC servers). A fatal one stops the plugin, and with it meshlet.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.fail != nil {
		d.fail(fmt.Errorf("%s: %w", msg, err))
	}
}

// Refusals is Refused's count.
func (d *Driver) Refusals() uint64 { return d.Refused.Load() }
