package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Core is the part of the enrollment core the plugin drives.
type Core interface {
	Enroll(ctx context.Context, pod enroll.Pod) (enroll.Result, error)
	Release(ctx context.Context, uid, sandboxID string) error
	Forget(ctx context.Context, uid, sandboxID string) error
	Reconcile(ctx context.Context, pods []enroll.Pod) (late []enroll.Pod, err error)
	Status(uid string) (enroll.PodStatus, bool)
	CurrentSandbox(uid string) string
}

var _ Core = (*enroll.Core)(nil)

// Metrics receives what the plugin observes. Implementations must not
// block.
type Metrics interface {
	// Enrolled records one enrollment done inside a runtime hook (err:
	// it failed).
	Enrolled(pod enroll.PodRef, d time.Duration, err error)
	// LateEnrolled counts pods enrolled at Synchronize: they started while
	// meshlet was not connected.
	LateEnrolled(n int)
	// Connected records the runtime connection state.
	Connected(bool)
}

// Config configures the plugin.
type Config struct {
	// SocketPath is the runtime's NRI socket.
	SocketPath string
	// Name and Index register the plugin ("10-meshlet").
	Name  string
	Index string
	// EnrollTimeout bounds one enrollment inside a hook. Keep it below the
	// runtime's plugin request timeout (2 s by default).
	EnrollTimeout time.Duration
	// CurrentEnrollTimeout, if set, is read at each hook in place of
	// EnrollTimeout: the node's settings change it while meshlet runs.
	CurrentEnrollTimeout func() time.Duration
	// MinBackoff and MaxBackoff bound reconnect attempts; StablePeriod is
	// how long a connection must last for the backoff to reset: longer than
	// a runtime that accepts the plugin and drops it at once keeps it, far
	// shorter than the time between restarts of a runtime being upgraded
	// or crash-looping, during which a grown backoff lets pods start
	// without the hook.
	MinBackoff, MaxBackoff, StablePeriod time.Duration
	// AfterSynchronize, if set, runs once the running pods are reconciled
	// (node-side cleanup of pods removed while meshlet was away).
	AfterSynchronize func(context.Context)
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{SocketPath: "/var/run/nri/nri.sock", Name: "meshlet", Index: "10",
		EnrollTimeout: 1500 * time.Millisecond,
		MinBackoff:    100 * time.Millisecond, MaxBackoff: 10 * time.Second, StablePeriod: 2 * time.Second}
}

// Plugin is the NRI plugin.
type Plugin struct {
	cfg       Config
	core      Core
	metrics   Metrics
	connected atomic.Bool
	runtime   atomic.Pointer[[2]string] // name and version, from the last Configure
}

// New returns a plugin driving core.
func New(cfg Config, core Core, metrics Metrics) *Plugin {
	return &Plugin{cfg: cfg, core: core, metrics: metrics}
}

// Runtime names the runtime the plugin last connected to ("" before the
// first connection).
func (p *Plugin) Runtime() (name, version string) {
	if r := p.runtime.Load(); r != nil {
		return r[0], r[1]
	}
	return "", ""
}

// Connected reports whether the runtime connection is up and synchronized.
func (p *Plugin) Connected() bool { return p.connected.Load() }

// Run connects to the runtime and serves until ctx ends, reconnecting
// whenever the runtime goes away.
func (p *Plugin) Run(ctx context.Context) error {
	return reconnect(ctx, p.cfg, p, func() { p.setConnected(false) })
}

// reconnect registers plugin with the runtime and serves it until ctx
// ends, connecting again, with backoff, whenever the runtime goes away;
// down runs each time a connection ends.
func reconnect(ctx context.Context, cfg Config, plugin any, down func()) error {
	logger := klog.FromContext(ctx).WithName("nri")
	backoff := cfg.MinBackoff
	for {
		start := time.Now()
		err := runOnce(klog.NewContext(ctx, logger), cfg, plugin)
		down()
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) >= cfg.StablePeriod {
			backoff = cfg.MinBackoff
		}
		logger.Info("Runtime connection lost, reconnecting", "plugin", cfg.Name, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, cfg.MaxBackoff)
	}
}

func runOnce(ctx context.Context, cfg Config, plugin any) error {
	s, err := stub.New(plugin,
		stub.WithPluginName(cfg.Name),
		stub.WithPluginIdx(cfg.Index),
		stub.WithSocketPath(cfg.SocketPath),
		// Runtimes with NRI ≥ 0.12.5 fail the request instead of running
		// the pod unmeshed if meshlet times out or is gone; older ones
		// ignore it (see deploy/ for the runtime-side guarantee).
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true}),
	)
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	return s.Run(ctx)
}

func (p *Plugin) setConnected(c bool) {
	if p.connected.Swap(c) != c {
		p.metrics.Connected(c)
	}
}

// Configure subscribes to the events the plugin handles.
func (p *Plugin) Configure(ctx context.Context, _, runtime, version string) (api.EventMask, error) {
	klog.FromContext(ctx).Info("Connected to runtime", "runtime", runtime, "version", version)
	p.runtime.Store(&[2]string{runtime, version})
	return api.MustParseEventMask("RunPodSandbox,StopPodSandbox,RemovePodSandbox,CreateContainer"), nil
}

// Synchronize reconciles with the runtime's running pods: of each pod, the
// sandbox that runs (runningSandboxes). Pods the core did not know in that
// sandbox and now enrolled started while meshlet was away: they are logged
// and counted. Errors are logged: failing Synchronize would only keep the
// plugin from registering and leave every new pod unserved.
func (p *Plugin) Synchronize(ctx context.Context, sandboxes []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	logger := klog.FromContext(ctx)
	sandboxes = runningSandboxes(ctx, sandboxes, p.core.CurrentSandbox)
	pods := make([]enroll.Pod, 0, len(sandboxes))
	for _, sb := range sandboxes {
		pod, bad := podFromSandbox(sb)
		if len(bad) > 0 {
			logger.Info("Ignoring unparsable pod IPs", "pod", klog.KRef(pod.Namespace, pod.Name), "ips", bad)
		}
		pods = append(pods, pod)
	}
	lateEnrolled, err := p.core.Reconcile(ctx, pods)
	for _, pod := range lateEnrolled {
		logger.Info("Pod enrolled late: it started while meshlet was not connected", "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID)
	}
	late := len(lateEnrolled)
	p.metrics.LateEnrolled(late)
	if err != nil {
		logger.Error(err, "Synchronize: some pods could not be reconciled")
	}
	if p.cfg.AfterSynchronize != nil {
		p.cfg.AfterSynchronize(ctx)
	}
	logger.Info("Synchronized with runtime", "pods", len(pods), "lateEnrolled", late)
	p.setConnected(true)
	return nil, nil
}

// RunPodSandbox enrolls the pod before any of its containers exist.
func (p *Plugin) RunPodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	pod, bad := podFromSandbox(sb)
	if len(bad) > 0 {
		return fmt.Errorf("meshlet: pod %s/%s: unparsable IPs %q from the runtime", pod.Namespace, pod.Name, bad)
	}
	if _, err := p.enroll(ctx, pod); err != nil {
		return fmt.Errorf("meshlet: pod %s/%s must join the mesh but could not be enrolled (the runtime will retry): %w",
			pod.Namespace, pod.Name, err)
	}
	return nil
}

// hookContext bounds one hook's work by the enroll timeout, below the
// runtime's own deadline: a hook that runs out of it answers the runtime
// in time (a late answer gets the plugin dropped, and the pod run without
// meshlet).
func (p *Plugin) hookContext(ctx context.Context, what string) (context.Context, context.CancelFunc) {
	timeout := p.cfg.EnrollTimeout
	if p.cfg.CurrentEnrollTimeout != nil {
		timeout = p.cfg.CurrentEnrollTimeout()
	}
	return context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%s exceeded the enroll timeout (%v)", what, timeout))
}

func (p *Plugin) enroll(ctx context.Context, pod enroll.Pod) (enroll.Result, error) {
	ctx, cancel := p.hookContext(ctx, "enrollment")
	defer cancel()
	start := time.Now()
	res, err := p.core.Enroll(ctx, pod)
	if err != nil || res.Enrolled && res.Changed {
		p.metrics.Enrolled(enroll.PodRef{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}, time.Since(start), err)
	}
	return res, err
}

// StopPodSandbox releases the pod, if the sandbox is the one the pod runs
// in (not one the kubelet replaced). It never fails: a stop must not be
// held up by the mesh.
func (p *Plugin) StopPodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	klog.FromContext(ctx).V(2).Info("Pod sandbox stopping", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "podUID", sb.GetUid(), "sandbox", sb.GetId())
	ctx, cancel := p.hookContext(ctx, "release")
	defer cancel()
	if err := p.core.Release(ctx, sb.GetUid(), sb.GetId()); err != nil {
		klog.FromContext(ctx).Error(err, "Release reported an error", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()))
	}
	return nil
}

// RemovePodSandbox forgets the pod, if the sandbox is the one the pod
// runs in.
func (p *Plugin) RemovePodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	klog.FromContext(ctx).V(2).Info("Pod sandbox removed", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "podUID", sb.GetUid(), "sandbox", sb.GetId())
	ctx, cancel := p.hookContext(ctx, "forget")
	defer cancel()
	if err := p.core.Forget(ctx, sb.GetUid(), sb.GetId()); err != nil {
		klog.FromContext(ctx).Error(err, "Forget reported an error", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()))
	}
	return nil
}

// ErrNotMeshed refuses a container of a pod that must be meshed and is not.
var ErrNotMeshed = errors.New("pod must be meshed but is not enrolled")

// CreateContainer is the fail-closed gate: an app container starts only in
// a pod that is enrolled or that policy leaves out of the mesh. Enroll is
// idempotent, so for an enrolled pod this is a cheap check, and a pod the
// core missed (a race with a reconnect) is enrolled now.
func (p *Plugin) CreateContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	pod, _ := podFromSandbox(sb)
	res, err := p.enroll(ctx, pod)
	if err != nil && res.Enrolled {
		// The pod runs meshed as it was (a rewrite of its rules that
		// failed leaves them): its containers start; the change is
		// made by the next convergence.
		klog.FromContext(ctx).Info("Pod stays enrolled as it was; its change failed", "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID, "err", err)
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("meshlet: refusing container %q of pod %s/%s: %w: %w",
			c.GetName(), pod.Namespace, pod.Name, ErrNotMeshed, err)
	}
	return nil, nil, nil
}
