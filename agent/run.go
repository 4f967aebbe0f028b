package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/debug"
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/meshready"
	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/nodesettings"
	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/nodestatus"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/draplugin/claimstore"
	gateserver "github.com/meshlet/meshlet/draplugin/gate/server"
	"github.com/meshlet/meshlet/internal/httpserve"
	"github.com/meshlet/meshlet/internal/version"
	"github.com/meshlet/meshlet/nriplugin"
)

// Run runs the daemon until ctx ends or a component fails, and then stops
// its components in shutdownOrder.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	started := time.Now()
	if err := cfg.Validate(); err != nil {
		return err
	}
	// The node settings, until the ConfigMaps are read: the flags' with the
	// last good documents of the ConfigMaps saved in --state-dir.
	liveSettings := live.New(ctx, flagValues(cfg), cfg.StateDir, cfg.ConfigMaps)
	initial := liveSettings.Values()
	if err := setLogVerbosity(initial.LogVerbosity); err != nil {
		return err
	}
	polCfg, err := policyConfig(cfg.Policy, initial)
	if err != nil {
		return err
	}
	pol, err := policy.New(polCfg)
	if err != nil {
		return err
	}
	var enrollTimeout atomic.Int64
	enrollTimeout.Store(int64(initial.EnrollTimeout))
	podDefaults := cfg.PodDefaults
	podDefaults.DNSCapture = initial.DNSCapture
	cfg.Redirect.IPv6 = initial.IPv6
	lc := newLifecycle(ctx, shutdownOrder)
	defer lc.stop()
	root := lc.root
	var resolver enroll.PodInfoResolver = enroll.StandaloneResolver{}
	var status enroll.StatusReporter = enroll.LogStatus{Logger: logger}
	var api *apiClients
	if !cfg.Standalone {
		if api, err = newAPIClients(cfg); err != nil {
			return err
		}
		lc.onStop("events", api.events.Shutdown)
		resolver, status = api.watcher, api.status
		api.watchSettings(ctx, cfg.ConfigMaps, liveSettings)
		if cfg.Policy.Revision != "" {
			api.watchRevisionTags(ctx, pol)
		}
	}
	// Each revision's meshlet has node rules of its own.
	cfg.Redirect.Instance = cfg.Policy.Revision
	// Per-pod settings, highest precedence first: the pod's mesh claims,
	// its annotations, then (in the core) the node's defaults. A claim also
	// makes its pod must-mesh.
	var decide enroll.Policy = pol
	settings := []enroll.SettingsSource{pol}
	var claims *claimstore.Store
	dra := cfg.DRA.Enabled && !cfg.Standalone
	if dra {
		dra = apiServesDRA(ctx, api)
	}
	if dra {
		if claims, err = draplugin.OpenClaims(cfg.StateDir, logger); err != nil {
			return err
		}
		lc.onStop("prepared claims", func() { claims.Close() })
		decide = draplugin.NewClaimPolicy(pol, claims)
		settings = append([]enroll.SettingsSource{claims}, settings...)
	}
	reg := metrics.NewRegistry()
	var driver *draplugin.Driver
	if dra {
		driver, err = draplugin.New(cfg.DRA, draplugin.Deps{Client: api.client, NodeName: cfg.NodeName, Claims: claims,
			Pods: api.watcher, Policy: pol, Version: version.String(), RedirectBackend: string(cfg.Redirect.Backend), IPv6: cfg.Redirect.IPv6,
			ObservePrepare: metrics.DRAPrepareObserver(reg)})
		if err != nil {
			return err
		}
		metrics.RegisterDRA(reg, driver, claims)
		if cfg.DRA.Gate.Enabled {
			// Before the plugin serves: a prepared device names the spec.
			if err := cfg.DRA.InstallGate(); err != nil {
				return fmt.Errorf("container gate (--gate=false turns it off): %w", err)
			}
		}
		// Served before the node lock when it has a socket of its own
		// (--pod-uid: rolling-update registration): during an update the
		// kubelet may prepare claims through this meshlet while the
		// previous one still serves the node.
		if cfg.DRA.PodUID != "" {
			lc.start("DRA kubelet plugin", driver.Run)
		}
	}
	ready := &health.Readiness{Warnings: liveSettings.Problems}
	if driver != nil {
		ready.SetPlugin(driver.Serving, cfg.DRA.PodUID == "")
	}
	if cfg.HealthSocket != "" {
		// Served before the node lock: a meshlet waiting for the
		// previous one to exit (a surge update) is probed too.
		s, err := health.ServeSocket(cfg.HealthSocket, health.Handler(ready.Check))
		if err != nil {
			return err
		}
		lc.onStop("health socket", func() { s.StopLogged(logger) })
	}
	var apiClient kubernetes.Interface
	if api != nil {
		apiClient = api.client
	}
	standby, endStandby := context.WithCancel(root)
	release, err := state.AcquireNodeLock(root, cfg.StateDir, cfg.Policy.Revision, standbyChecks(standby, ready, cfg, apiClient))
	endStandby()
	if err != nil {
		return stopped(ctx, root, err)
	}
	lc.onStop("node lock", release)
	ready.SetLockHeld()
	if driver != nil && cfg.DRA.PodUID == "" {
		lc.start("DRA kubelet plugin", driver.Run)
	}
	if dra && cfg.DRA.Gate.Enabled {
		// Again: a meshlet uninstalled just before this one took the node
		// removed the spec and the hook on its way out.
		if err := cfg.DRA.InstallGate(); err != nil {
			return fmt.Errorf("container gate (--gate=false turns it off): %w", err)
		}
	}
	zdsCfg := zds.Config{SocketPath: cfg.ZtunnelSocket, SnapshotHold: cfg.SnapshotHold}
	if api != nil {
		zdsCfg.Refused = api.events.ZtunnelRefused
	}
	// A node served by another agent (istio-cni's, being replaced) is
	// taken over once that agent has gone: until then this meshlet takes
	// neither ztunnel's socket nor the runtime hook, so no pod is meshed
	// by both.
	tookOver := make(chan struct{})
	server, err := zds.ListenWhenFree(root, zdsCfg, func() {
		logger.Info("Another agent serves ztunnel's socket (istio-cni's node agent?): waiting for it to exit before taking the socket and the runtime hook", "socket", cfg.ZtunnelSocket)
		ready.SetServing(func() error {
			return fmt.Errorf("waiting for ztunnel's socket %s: another agent (istio-cni?) serves it", cfg.ZtunnelSocket)
		})
		if standbyMode(cfg) {
			lc.start("standby hook", func(ctx context.Context) error {
				runStandby(ctx, lc, cfg, api, resolver, decide, tookOver)
				return nil
			})
		}
	})
	if err != nil {
		return stopped(ctx, root, err)
	}
	lc.onStop("ztunnel server", func() { server.Close() })
	lc.start("istio-cni's plugin", func(ctx context.Context) error {
		cnifallback.IstioCNILeft(ctx, cfg.CNI)
		<-ctx.Done()
		return nil
	})
	redir, err := redirect.New(cfg.Redirect)
	if err != nil {
		return fmt.Errorf("redirect (%s): %w", cfg.Redirect.Backend, err)
	}
	lc.onStop("redirect", func() { redir.Close() }) // rules stay: see shutdownOrder
	reporters := enroll.StatusReporters{status}
	if driver != nil {
		reporters = append(reporters, driver)
	}
	opener, err := netns.NewOpener(cfg.Redirect.HostNetnsFd, cfg.SkipPodIPCheck)
	if err != nil {
		return err
	}
	bootID, err := state.BootID()
	if err != nil {
		return fmt.Errorf("the checkpoint needs the kernel's boot ID: %w", err)
	}
	checkpointed := state.LoadAtStart(cfg.StateDir, bootID, logger)
	var m *metrics.Metrics
	core, err := enroll.New(enroll.Ports{Resolver: resolver, Policy: decide, Settings: settings,
		Opener: opener, Redirector: redir, Proxy: server, Status: reporters},
		enroll.Config{Defaults: podDefaults, Checkpointed: checkpointed, Retried: func(pod enroll.PodRef, attempt int, next time.Duration, err error) {
			m.Retried(pod, attempt, next, err) // set before any pod is converged
		}})
	if err != nil {
		return err
	}
	// ztunnel drains, at a snapshot's end, every pod the snapshot leaves
	// out: the previous meshlet's pods are named until this one adopts
	// them or finds them gone, and the snapshot waits for the runtime's
	// listing (bounded).
	server.Resume(state.UIDs(checkpointed), core.Listed())
	go func() {
		// The standby hook gives way once meshlet's own has the pods.
		select {
		case <-core.Listed():
		case <-root.Done():
		}
		close(tookOver)
		if root.Err() == nil {
			releaseStartup(logger)
		}
	}()
	cniExcluded := cnifallback.NewExclusions(cfg.Policy.ZtunnelNamespace, initial.ExcludedNamespaces)
	targets := settingsTargets{cfg: cfg, policy: pol, core: core, enrollTimeout: &enrollTimeout, ipv6Followers: []ipv6Follower{redir},
		cniExcluded: cniExcluded}
	if driver != nil {
		targets.ipv6Followers = append(targets.ipv6Followers, driver)
	}
	hooks := live.Hooks{Valid: metrics.SettingsValid(reg, cfg.ConfigMaps), Apply: func(ctx context.Context, v nodesettings.Values) {
		targets.apply(ctx, v)
		if api != nil {
			// Through the label changes' path: debounced, after sync.
			api.watcher.RequestReevaluation()
		}
	}}
	if api != nil {
		hooks.Invalid = api.events.InvalidSettings
	}
	liveSettings.SetHooks(hooks)
	if api != nil {
		m = metrics.New(reg, core, server, api.watcher, api.events)
	} else {
		m = metrics.New(reg, core, server, nil, nil)
	}
	failures := debug.NewFailures()
	m.OnEnrolled = failures.Enrolled
	source := &modeSource{cfg: cfg, onPick: func(mode Mode) { m.Mode(string(mode)) },
		build: func(ctx context.Context, mode Mode) (podSource, error) {
			if mode == ModeCNI {
				if cfg.Policy.Revision != "" {
					return nil, errors.New("the runtime has no NRI (--mode auto picked CNI mode), and --revision needs it: in CNI mode one meshlet-cni in the runtime's chain serves the node")
				}
				return newCNIMode(cfg, core, m, redir, cniExcluded)
			}
			removeStaleCNI(ctx, cfg)
			nriCfg := cfg.NRI
			nriCfg.CurrentEnrollTimeout = func() time.Duration { return time.Duration(enrollTimeout.Load()) }
			nriCfg.AfterSynchronize = func(ctx context.Context) {
				// The runtime listed every running pod: node-side state of
				// pods removed while meshlet was away can go.
				if err := redir.RetainNodeState(core.EnrolledIPs()); err != nil {
					logger.Error(err, "Cleaning node-side state of pods removed while meshlet was away")
				}
			}
			plugin := nriplugin.New(nriCfg, core, m)
			return newNRISource(cfg, plugin, core, m), nil
		}}
	meshState := meshready.Of(source.Connected, server.Connections, cfg.ZtunnelSocket)
	if driver != nil {
		driver.Lead(draplugin.Node{State: meshState, Records: core,
			Prepared: func(pods []string) {
				// A claim for a pod that already runs (prepared again after
				// a restart, or late) converges it.
				for _, uid := range pods {
					if _, known := core.Status(uid); known {
						api.watcher.RequestReevaluation()
						return
					}
				}
			}})
	}
	// meshlet's own DaemonSet: an uninstall, or an update that changes
	// what the next meshlet does on the node.
	var daemonSet *kube.DaemonSetWatch
	if api != nil && cfg.PodName != "" {
		daemonSet = kube.WatchDaemonSet(root, api.client, cfg.PodNamespace, cfg.PodName)
	}
	nodeReadiness := startNodeReadiness(lc, cfg, api, meshState, daemonSet)
	if nodeReadiness != nil {
		metrics.RegisterNodeReadiness(reg, nodeReadiness)
	}

	var zdsServing atomic.Bool
	serving := func() error {
		switch {
		case !zdsServing.Load():
			return errors.New("ZDS socket not serving")
		case api != nil:
			if err := api.synced(); err != nil {
				return err
			}
		}
		return source.notReady()
	}
	ready.SetServing(serving)
	// The TCP listeners, unlike the health socket, are the serving
	// meshlet's: their ports are the node's (host network).
	if cfg.HealthAddr != "" {
		s, err := httpserve.Listen("health", cfg.HealthAddr, health.Handler(ready.Check))
		if err != nil {
			return err
		}
		lc.onStop("HTTP endpoints", func() { s.StopLogged(logger) })
	}
	debugServer, err := debug.Listen(cfg.StateDir, debug.Handler(debug.Sources{Node: cfg.NodeName,
		Revision: func() (string, []string) { return cfg.Policy.Revision, pol.RevisionTags().TagsOf(cfg.Policy.Revision) },
		Mode:     source.current, Core: core, Ztunnel: server, Settings: liveSettings.Report, NetnsPaths: debug.NetnsPaths(debug.NetnsDirs), Failures: failures,
		Summary: func() nodestatus.Summary {
			return summarize(cfg, started, ready, meshState, source, server, api, driver, claims, nodeReadiness)
		}}))
	if err != nil {
		return err
	}
	lc.onStop("HTTP endpoints", func() { debugServer.StopLogged(logger) })
	if cfg.MetricsAddr != "" {
		s, err := httpserve.Listen("metrics", cfg.MetricsAddr, metrics.Handler(reg))
		if err != nil {
			return err
		}
		lc.onStop("HTTP endpoints", func() { s.StopLogged(logger) })
	}

	if dra {
		// Also with --gate=false: containers of pods prepared while the
		// gate was on carry its device, and must keep starting.
		gate, err := gateserver.Listen(gateserver.Config{SocketPath: cfg.DRA.Gate.Socket, Timeout: cfg.DRA.Gate.Timeout, Observe: metrics.GateObserver(reg)}, core)
		if err != nil {
			return err
		}
		lc.onStop("container gate", func() { gate.Close() })
		lc.start("container gate", gate.Serve)
	}
	lc.start("ztunnel server", func(ctx context.Context) error {
		zdsServing.Store(true)
		defer zdsServing.Store(false)
		return server.Serve(ctx)
	})
	if api != nil {
		lc.start("API watchers", func(ctx context.Context) error {
			api.run(ctx, core)
			return nil
		})
		api.waitForSync(root, logger)
	}
	lc.start("retries", func(ctx context.Context) error {
		core.RunRetries(ctx)
		return nil
	})
	lc.start("checkpoint", func(ctx context.Context) error {
		state.RunWriter(ctx, cfg.StateDir, bootID, core, m.CheckpointFailed)
		return nil
	})
	onUninstall(ctx, lc, cfg, api, daemonSet, uninstallParts{core: core, source: source, driver: driver, redir: redir, nodeReadiness: nodeReadiness})
	lc.start("pod source", source.Run)
	logger.Info("meshlet started", "node", cfg.NodeName, "revision", cfg.Policy.Revision, "mode", cfg.Mode, "nriSocket", cfg.NRI.SocketPath,
		"ztunnelSocket", server.Addr(), "redirect", cfg.Redirect.Backend, "standalone", cfg.Standalone, "dra", dra, "gate", dra && cfg.DRA.Gate.Enabled, "version", version.String())

	<-root.Done()
	cause := context.Cause(root)
	logger.Info("meshlet stopping", "cause", cause)
	lc.stop()
	if ctx.Err() != nil {
		return nil // asked to stop: a clean shutdown
	}
	return cause
}

// startNodeReadiness keeps the node's taint or condition (--node-taint,
// --node-condition) in line with its mesh's state; nil when neither is set.
func startNodeReadiness(lc *lifecycle, cfg Config, api *apiClients, state func() meshready.State, ds *kube.DaemonSetWatch) *kube.NodeReadiness {
	if api == nil || (cfg.NodeTaint == "" && cfg.NodeCondition == "") {
		return nil
	}
	nr := kube.NewNodeReadiness(api.client, kube.NodeReadinessConfig{Node: cfg.NodeName, TaintKey: cfg.NodeTaint, ConditionType: cfg.NodeCondition})
	lc.start("node readiness", func(ctx context.Context) error {
		nr.Run(ctx, state, func() bool { return successorKeeps(cfg, ds) })
		return nil
	})
	return nr
}

// successorKeeps says whether the meshlet that follows this one on the
// node keeps its taint and condition (kube.DaemonSetWatch.Keeps): an
// update that turns them off or renames them, or an uninstall, would
// otherwise leave this meshlet's taint on the node for good. Without the
// DaemonSet's watch (no --pod-name) it is taken to.
func successorKeeps(cfg Config, ds *kube.DaemonSetWatch) bool {
	return ds == nil || ds.Keeps(cfg.NodeTaint, cfg.NodeCondition)
}

// stopped is Run's result when start-up waited and was interrupted: nil
// when asked to stop, a component's failure, or err.
func stopped(ctx, root context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if root.Err() != nil {
		return context.Cause(root)
	}
	return err
}
