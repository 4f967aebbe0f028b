package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/cnifallback/install"
	"github.com/meshlet/meshlet/nriplugin"
)

// nriGrace is how long --mode auto keeps probing the NRI socket once the
// runtime answers on CRI: a runtime that is still starting may serve CRI
// a moment before its NRI socket.
const nriGrace = 2 * time.Second

// selectMode resolves --mode auto: NRI when the runtime's NRI socket
// answers; CNI when the runtime answers on its CRI socket but not on NRI
// (NRI disabled, or a runtime without it). With neither answering it
// waits: after a reboot meshlet may start before the runtime, and
// guessing then would pick the wrong mode for the node's lifetime.
func selectMode(ctx context.Context, cfg Config) (Mode, string, error) {
	if cfg.Mode != ModeAuto {
		return cfg.Mode, "--mode=" + string(cfg.Mode), nil
	}
	logger := klog.FromContext(ctx)
	for logged := false; ; {
		if nriplugin.Answers(ctx, cfg.NRI.SocketPath) {
			return ModeNRI, "the runtime's NRI socket " + cfg.NRI.SocketPath + " answers", nil
		}
		endpoint, err := cri.Endpoint(ctx, cfg.CNI.CRISocket)
		if err == nil {
			deadline := time.Now().Add(nriGrace)
			for time.Now().Before(deadline) {
				if nriplugin.Answers(ctx, cfg.NRI.SocketPath) {
					return ModeNRI, "the runtime's NRI socket " + cfg.NRI.SocketPath + " answers", nil
				}
				if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
					return "", "", err
				}
			}
			return ModeCNI, fmt.Sprintf("the runtime answers on its CRI socket %s but not on the NRI socket %s (NRI disabled or not supported)", endpoint, cfg.NRI.SocketPath), nil
		}
		if !logged {
			logger.Info("Waiting for the container runtime to pick a mode: neither its NRI nor its CRI socket answers", "nriSocket", cfg.NRI.SocketPath, "cri", err)
			logged = true
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return "", "", err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// nriSource is NRI mode: the plugin, and the listings of the runtime's
// pods for the removals it does not send the plugin.
//
// NRI tells a plugin of a pod's stop and removal, but containerd (2.4.2
// and the 2.x before it) decides whether to send them from state it keeps
// in memory and rebuilds, when a plugin synchronizes, for containers only:
// after containerd restarts, a pod that was running then is stopped and
// removed without StopPodSandbox or RemovePodSandbox reaching any plugin
// (internal/nri/nri.go, needsStopping and syncPlugin). Without the
// listings such a pod's ztunnel entry, checkpoint record and namespace
// descriptors would outlive it.
type nriSource struct {
	*nriplugin.Plugin
	removals *cri.Reconciler
}

// newNRISource is NRI mode over the core: a pod missing from the
// runtime's ready sandboxes for twice --cri-resync-interval is gone (NRI
// enrolls a pod a few milliseconds before the runtime marks its sandbox
// ready).
func newNRISource(cfg Config, plugin *nriplugin.Plugin, core cri.ReconciledCore, m *metrics.Metrics) nriSource {
	removals := cri.NewReconciler(core, cri.ReconcilerConfig{Interval: cfg.CNI.ResyncInterval, Grace: 2 * cfg.CNI.ResyncInterval,
		Unheard: "its stop and removal", Missed: m.MissedRemovals,
		Dial:  func(ctx context.Context) (cri.Listing, error) { return cri.DialEndpoint(ctx, cfg.CNI.CRISocket) },
		Check: cri.SameRuntime(func() string { name, _ := plugin.Runtime(); return name })})
	return nriSource{Plugin: plugin, removals: removals}
}

func (s nriSource) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { s.removals.Run(klog.NewContext(ctx, klog.FromContext(ctx).WithName("removals")), nil) })
	return s.Plugin.Run(ctx)
}

var _ podSource = nriSource{}

// podSource is how new pods reach the core: the NRI plugin, or CNI mode.
type podSource interface {
	Run(ctx context.Context) error
	// Connected is true while new pods are enrolled before they start.
	Connected() bool
}

var (
	_ podSource = (*nriplugin.Plugin)(nil)
	_ podSource = (*cnifallback.Fallback)(nil)
)

// modeSource picks the node's pod source once the runtime answers (see
// selectMode) and then runs it. Picking happens inside Run, so that a
// meshlet started before the runtime serves ztunnel, the API watchers and
// its health endpoints meanwhile, and reports why it is not ready.
type modeSource struct {
	cfg Config
	// build makes the source for the mode picked; ctx is the source's
	// lifetime.
	build  func(context.Context, Mode) (podSource, error)
	onPick func(Mode)
	picked atomic.Pointer[pickedSource]
}

type pickedSource struct {
	mode   Mode
	source podSource
}

func (s *modeSource) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	mode, why, err := selectMode(ctx, s.cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if mode == ModeCNI && s.cfg.Standalone {
		return errStandaloneCNI
	}
	src, err := s.build(ctx, mode)
	if err != nil {
		return err
	}
	logger.Info("Pod source selected", "mode", mode, "why", why)
	s.picked.Store(&pickedSource{mode: mode, source: src})
	s.onPick(mode)
	return src.Run(ctx)
}

func (s *modeSource) Connected() bool {
	p := s.picked.Load()
	return p != nil && p.source.Connected()
}

// notReady says why new pods are not enrolled now, or nil.
func (s *modeSource) notReady() error {
	p := s.picked.Load()
	switch {
	case p == nil:
		return errors.New("waiting for the container runtime: neither its NRI socket nor its CRI socket answers (--mode " + string(s.cfg.Mode) + ")")
	case p.source.Connected():
		return nil
	case p.mode == ModeCNI:
		return errors.New("CNI mode: meshlet-cni is not chained in the runtime's CNI configuration, or the running pods are not synchronized yet")
	}
	return errors.New("not connected to the container runtime (NRI)")
}

// cniMode is whether CNI mode was picked.
func (s *modeSource) cniMode() bool {
	p := s.picked.Load()
	return p != nil && p.mode == ModeCNI
}

// current names the pod source in use, or says that it is being chosen.
func (s *modeSource) current() string {
	if p := s.picked.Load(); p != nil {
		return string(p.mode)
	}
	return "choosing (--mode " + string(s.cfg.Mode) + ")"
}

// canTakeOver says, changing nothing, whether this meshlet could serve the
// node once it holds the node lock: the runtime answers (its NRI socket
// dialled only while dial: each connection that does not register as a
// plugin costs the runtime an error in its log, so once it has answered,
// later checks see the socket is there), the redirect backend runs here,
// and (with an API server and --pod-name) another running pod of
// meshlet's own DaemonSet is on the node: the pod the update replaces,
// which will exit. In a surge update the DaemonSet controller stops the
// old pod once the new one is Ready and then moves on to the next node,
// so this is all that stands between a release that cannot serve and
// every node.
func canTakeOver(ctx context.Context, cfg Config, client kubernetes.Interface, dial bool) error {
	if err := runtimeAnswers(ctx, cfg, dial); err != nil {
		return err
	}
	if err := redirect.Check(cfg.Redirect); err != nil {
		return fmt.Errorf("redirect backend %s: %w", cfg.Redirect.Backend, err)
	}
	if client == nil || cfg.PodName == "" {
		return nil
	}
	previous, err := kube.SiblingOnNode(ctx, client, cfg.PodNamespace, cfg.PodName, cfg.NodeName)
	switch {
	case err != nil:
		return fmt.Errorf("API server: %w", err)
	case previous == "":
		return errors.New("the node lock is held, but no other pod of meshlet's DaemonSet runs on this node: nothing will hand the node over")
	}
	return nil
}

// runtimeAnswers is whether the runtime answers where --mode will look;
// unless dial, the NRI socket only has to be there.
func runtimeAnswers(ctx context.Context, cfg Config, dial bool) error {
	nri := func() error {
		if !dial {
			if fi, err := os.Stat(cfg.NRI.SocketPath); err != nil || fi.Mode().Type() != fs.ModeSocket {
				return fmt.Errorf("the runtime's NRI socket %s is gone", cfg.NRI.SocketPath)
			}
			return nil
		}
		if !nriplugin.Answers(ctx, cfg.NRI.SocketPath) {
			return fmt.Errorf("the runtime's NRI socket %s does not answer", cfg.NRI.SocketPath)
		}
		return nil
	}
	cri := func() error {
		if _, err := cri.Endpoint(ctx, cfg.CNI.CRISocket); err != nil {
			return fmt.Errorf("the runtime's CRI socket: %w", err)
		}
		return nil
	}
	switch cfg.Mode {
	case ModeNRI:
		return nri()
	case ModeCNI:
		return cri()
	}
	if err := nri(); err != nil {
		if criErr := cri(); criErr != nil {
			return errors.Join(err, criErr)
		}
	}
	return nil
}

// standbyChecks returns what state.AcquireNodeLock calls once it waits on
// another meshlet: checks, in the background until ctx ends, of whether
// this one could take the node over.
func standbyChecks(ctx context.Context, r *health.Readiness, cfg Config, client kubernetes.Interface) func() {
	return func() {
		dial := true // until the runtime has answered once
		go r.WatchTakeover(ctx, func(ctx context.Context) error {
			err := canTakeOver(ctx, cfg, client, dial)
			dial = dial && err != nil
			return err
		})
	}
}

// newCNIMode assembles CNI mode over the core; excluded keeps meshlet-cni's
// entry in step with the node settings.
func newCNIMode(cfg Config, core *enroll.Core, m *metrics.Metrics, redir *redirect.Redirector, excluded *cnifallback.Exclusions) (*cnifallback.Fallback, error) {
	icfg, err := cfg.CNI.InstallerConfig(cfg.CNIExcluded(), true)
	if err != nil {
		return nil, err
	}
	var fb *cnifallback.Fallback
	icfg.RuntimeBinDirs = cnifallback.RuntimeBinDirs(cfg.CNI.CRISocket)
	icfg.OnReassert = func(trigger string, _ time.Duration) {
		// The first install is not a re-assert, nor a rewrite for new
		// node settings.
		if trigger != "start" && trigger != "settings" {
			m.CNIReasserted()
		}
		// A pod set up while the entry was missing started outside the
		// chain: list the runtime's pods soon to enroll it.
		fb.Resync()
	}
	inst, err := install.New(icfg)
	if err != nil {
		return nil, err
	}
	excluded.Attach(inst)
	fb = cnifallback.New(cfg.CNI, cnifallback.Deps{Core: core, Installer: inst, Metrics: m,
		DialRuntime: func(ctx context.Context) (cri.Listing, error) { return cri.DialEndpoint(ctx, cfg.CNI.CRISocket) },
		AfterSync: func(ctx context.Context) {
			if err := redir.RetainNodeState(core.EnrolledIPs()); err != nil {
				klog.FromContext(ctx).Error(err, "Cleaning node-side state of pods removed while meshlet was away")
			}
		}})
	return fb, nil
}

// removeStaleCNI takes meshlet-cni out of the CNI chain on a node served
// through NRI (the runtime gained NRI since meshlet last ran in CNI mode,
// or it was installed by hand): nothing serves its socket in NRI mode, so
// an entry left behind would fail every pod outside its excluded
// namespaces. The binary stays (a runtime may still run it for an old pod's DEL).
func removeStaleCNI(ctx context.Context, cfg Config) {
	if err := cnifallback.RemoveFromChain(ctx, cfg.CNI, cfg.CNIExcluded()); err != nil {
		klog.FromContext(ctx).Error(err, "Removing meshlet-cni from the CNI chain (NRI serves this node)", "confDir", cfg.CNI.ConfDir)
	}
}

// errStandaloneCNI: CNI passes no labels, so CNI mode needs the API server.
var errStandaloneCNI = errors.New("the runtime offers no NRI and CNI mode needs the API server (CNI passes no pod labels to select pods by): drop --standalone, or enable NRI in the runtime")

// standbyMode reports whether a meshlet waiting to take the node over
// serves the standby hook: where it would serve the node through NRI.
func standbyMode(cfg Config) bool {
	switch cfg.Mode {
	case ModeNRI:
		return true
	case ModeAuto:
		_, err := os.Stat(cfg.NRI.SocketPath)
		return err == nil
	}
	return false
}

// runStandby serves the standby hook (nriplugin.Standby) while this
// meshlet waits to take the node over from istio-cni, until tookOver is
// closed (meshlet's own hook has listed the pods), then waits for ctx.
// With an API server, the hook decides as meshlet's own does, with the
// namespaces' labels: the informers start now (at most syncWait is waited
// for them), and run on until the API watchers stop.
func runStandby(ctx context.Context, lc *lifecycle, cfg Config, api *apiClients, resolver enroll.PodInfoResolver, decide enroll.Policy, tookOver <-chan struct{}) {
	if api != nil {
		informers, stop := context.WithCancel(context.WithoutCancel(lc.root))
		lc.onStop("API watchers", stop)
		api.watcher.Start(informers)
		synced, cancel := context.WithTimeout(ctx, syncWait)
		err := api.watcher.WaitForSync(synced)
		cancel()
		if err != nil {
			klog.FromContext(ctx).Info("Standby hook: the informers have not synced; pods the API server has not shown are decided from their sandbox's labels", "err", err)
		}
	}
	standby := nriplugin.NewStandby(cfg.NRI, nriplugin.StandbyChecks{Resolver: resolver, Policy: decide,
		OtherAgentChained: func() (bool, error) {
			files, err := install.ChainedIn(cfg.CNI.ConfDir, install.IstioCNIPluginType)
			return len(files) > 0, err
		},
		MeshedByOtherAgent: redirect.HasIstioRules,
		TookOver:           tookOver,
	})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-tookOver:
		case <-ctx.Done():
		}
		cancel()
	}()
	select {
	case <-tookOver: // already: nothing to stand by for
	default:
		_ = standby.Run(sctx)
	}
	<-ctx.Done()
}
