package cnifallback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/cnifallback/install"
	"github.com/meshlet/meshlet/cnifallback/server"
)

// Core is the part of the enrollment core CNI mode drives.
type Core interface {
	server.Core
	EnrollRunning(ctx context.Context, pod enroll.Pod) (enroll.Result, error)
	Reconcile(ctx context.Context, pods []enroll.Pod) (late []enroll.Pod, err error)
	Status(uid string) (enroll.PodStatus, bool)
	Pods() []enroll.PodStatus
	cri.Forgetter
}

var _ Core = (*enroll.Core)(nil)

// Installer keeps meshlet-cni chained in the runtime's CNI configuration.
type Installer interface {
	Run(ctx context.Context) error
	Installed() bool
}

var _ Installer = (*install.Installer)(nil)

// Metrics receives what CNI mode observes (the NRI plugin reports the
// same). Implementations must not block.
type Metrics interface {
	Enrolled(pod enroll.PodRef, d time.Duration, err error)
	LateEnrolled(n int)
	// MissedRemovals counts pods forgotten because the runtime's listings
	// no longer show them: their DEL never reached the agent.
	MissedRemovals(n int)
	Connected(bool)
}

// Deps are what CNI mode works with.
type Deps struct {
	Core      Core
	Installer Installer
	// DialRuntime connects to the runtime's CRI API; it is retried until
	// it succeeds.
	DialRuntime func(ctx context.Context) (cri.Listing, error)
	Metrics     Metrics
	// AfterSync, if set, runs once the pods running at start are
	// reconciled, before any ADD is served (node-side cleanup of pods
	// removed while meshlet was away).
	AfterSync func(context.Context)
}

// Fallback is CNI mode: the installer keeps meshlet-cni in the chain, the
// server turns its ADDs and DELs into enrollments, and the runtime's pod
// list reconciles the rest (the pods running at start, DELs that never
// reached the agent, pods that started while meshlet was out of the
// chain).
type Fallback struct {
	cfg     Config
	deps    Deps
	serving atomic.Bool
	// cniDirsChecked: the runtime's CNI directories were compared with
	// the flags' (once, at the first connection).
	cniDirsChecked atomic.Bool
	// recon lists the runtime's pods every ResyncInterval and soon after
	// a Resync.
	recon *cri.Reconciler

	mu sync.Mutex
	// deleted holds the sandboxes whose DEL the agent served (by sandbox
	// ID: a pod's other sandbox is not deleted with it), with when: a
	// listing taken while the sandbox was still stopping must not enroll
	// it again.
	deleted map[string]time.Time
}

// New returns CNI mode over deps.
func New(cfg Config, deps Deps) *Fallback {
	f := &Fallback{cfg: cfg, deps: deps, deleted: map[string]time.Time{}}
	f.recon = f.newReconciler()
	return f
}

// Connected is true while new pods are enrolled: meshlet-cni is chained in
// the configuration the runtime uses and the agent answers it.
func (f *Fallback) Connected() bool { return f.serving.Load() && f.deps.Installer.Installed() }

// Resync asks for a listing of the runtime's pods soon (after the
// installer re-asserted the chain: a pod created meanwhile may have missed
// meshlet-cni). It never blocks.
func (f *Fallback) Resync() { f.recon.Trigger() }

// Run serves CNI mode until ctx ends. The installer chains meshlet-cni
// first: until the agent answers, the plugin fails pods closed and the
// kubelet retries them, which beats letting mesh pods start unmeshed. Then
// the pods already running are reconciled, and only then are ADDs served,
// so no listing races an ADD at start.
func (f *Fallback) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("cni")
	ctx = klog.NewContext(ctx, logger)
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	// The goroutines below end with ctx: cancel before waiting.
	defer func() { cancel(nil); wg.Wait() }()
	wg.Go(func() {
		if err := f.deps.Installer.Run(ctx); err != nil {
			cancel(fmt.Errorf("CNI installer: %w", err))
		}
	})
	f.waitInstalled(ctx)

	lister, err := f.dial(ctx)
	if err != nil {
		return cause(ctx, err)
	}
	defer lister.Close()
	if err := f.syncAtStart(ctx, lister); err != nil {
		return cause(ctx, err)
	}
	srv, err := server.Listen(server.Config{SocketPath: f.cfg.Socket, Observe: f.deps.Metrics.Enrolled}, tombstoning{f})
	if err != nil {
		return err
	}
	defer srv.Close()
	wg.Go(func() { f.recon.Run(ctx, lister) })
	f.serving.Store(true)
	f.deps.Metrics.Connected(true)
	defer func() { f.serving.Store(false); f.deps.Metrics.Connected(false) }()
	logger.Info("Serving meshlet-cni", "socket", srv.Addr())
	if err := srv.Serve(ctx); err != nil {
		return err
	}
	return cause(ctx, nil)
}

// installWait bounds how long start-up waits for the installer's first
// pass: a node whose primary CNI is not installed yet must still get its
// running pods listed and ADDs served once the conflist appears.
const installWait = 5 * time.Second

// waitInstalled waits until meshlet-cni is chained (or installWait), so
// that the start-up listing is taken after the runtime can only set up
// pods through meshlet-cni: a pod set up before then is in the listing.
func (f *Fallback) waitInstalled(ctx context.Context) {
	deadline := time.Now().Add(installWait)
	for !f.deps.Installer.Installed() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// cause is the installer's failure if it stopped Run, nil if Run was
// asked to stop, else err.
func cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		if errors.Is(c, context.Canceled) {
			return nil
		}
		return c
	}
	return err
}

// dial connects to the runtime, retrying: after a node reboot the agent
// may start before the runtime.
func (f *Fallback) dial(ctx context.Context) (cri.Listing, error) {
	logger := klog.FromContext(ctx)
	backoff := 100 * time.Millisecond
	for logged := false; ; {
		dctx, cancel := context.WithTimeout(ctx, cri.ListTimeout)
		l, err := f.deps.DialRuntime(dctx)
		cancel()
		if err == nil {
			f.checkCNIDirs(ctx, l)
			return l, nil
		}
		if !logged {
			logger.Info("Waiting for the container runtime's CRI API (retrying)", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// tombstoning records the sandboxes whose DEL the agent served.
type tombstoning struct{ f *Fallback }

func (t tombstoning) Enroll(ctx context.Context, pod enroll.Pod) (enroll.Result, error) {
	t.f.mu.Lock()
	delete(t.f.deleted, pod.SandboxID) // the runtime set it up again
	t.f.mu.Unlock()
	return t.f.deps.Core.Enroll(ctx, pod)
}

func (t tombstoning) Forget(ctx context.Context, uid, sandboxID string) error {
	t.f.mu.Lock()
	t.f.deleted[sandboxID] = time.Now()
	t.f.mu.Unlock()
	return t.f.deps.Core.Forget(ctx, uid, sandboxID)
}
