package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/nriplugin"
)

// Run runs the daemon until ctx ends or a component fails. Shutdown is
// ordered: the NRI plugin goes first (no new pods), then the API watchers,
// then the checkpoint writer (a last write), then the ZDS server, then the
// HTTP endpoints. Enrolled pods keep their rules: an agent restart or
// upgrade must not unmesh running pods (the next agent re-adopts them at
// Synchronize, and ztunnel keeps proxying meanwhile).
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	if err := cfg.Validate(); err != nil {
		return err
	}
	pol, err := policy.New(cfg.Policy)
	if err != nil {
		return err
	}
	server, err := zds.Listen(zds.Config{SocketPath: cfg.ZtunnelSocket})
	if err != nil {
		return err
	}
	defer server.Close()
	redir, err := redirect.New(cfg.Redirect)
	if err != nil {
		return fmt.Errorf("redirect (%s): %w", cfg.Redirect.Backend, err)
	}
	defer redir.Close() // rules stay: see above
	var resolver enroll.PodInfoResolver = standaloneResolver{}
	var status enroll.StatusReporter = logStatus{logger: logger}
	var api *apiClients
	if !cfg.Standalone {
		if api, err = newAPIClients(cfg); err != nil {
			return err
		}
		defer api.events.Shutdown()
		resolver, status = api.watcher, api.status
	}
	// Per-pod settings, highest precedence first: the pod's annotations,
	// then (in the core) the node's defaults.
	core, err := enroll.New(enroll.Ports{Resolver: resolver, Policy: pol, Settings: []enroll.SettingsSource{pol},
		Opener: netnsOpener{}, Redirector: redir, Proxy: server, Status: status},
		enroll.Config{Defaults: cfg.PodDefaults, Checkpointed: loadCheckpoint(cfg.StateDir, logger)})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var m *metrics
	if api != nil {
		m = newMetrics(reg, core, server.Connections, api.watcher, api.events)
	} else {
		m = newMetrics(reg, core, server.Connections, nil, nil)
	}
	nriCfg := cfg.NRI
	nriCfg.AfterSynchronize = func(ctx context.Context) {
		// The runtime listed every running pod: node-side state of pods
		// removed while meshlet was away can go.
		if err := redir.RetainNodeState(core.EnrolledIPs()); err != nil {
			logger.Error(err, "Cleaning node-side state of pods removed while meshlet was away")
		}
	}
	plugin := nriplugin.New(nriCfg, core, m)

	var zdsServing atomic.Bool
	ready := func() error {
		switch {
		case !zdsServing.Load():
			return errors.New("ZDS socket not serving")
		case api != nil && !api.watcher.Synced():
			return errors.New("pod and namespace informers not synced with the API server")
		case !plugin.Connected():
			return errors.New("not connected to the container runtime (NRI)")
		}
		return nil
	}
	var servers []*httpServer
	defer func() {
		for _, s := range servers {
			if err := s.stop(); err != nil {
				logger.Error(err, "Stopping HTTP server")
			}
		}
	}()
	if cfg.HealthAddr != "" {
		s, err := listenHTTP("health", cfg.HealthAddr, healthHandler(ready))
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	if cfg.MetricsAddr != "" {
		s, err := listenHTTP("metrics", cfg.MetricsAddr, metricsHandler(reg))
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}

	// Each component gets a lifetime of its own, so shutdown can be ordered;
	// a component that fails cancels the root with its error as the cause.
	root, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	start := func(name string, run func(context.Context) error) (stop func()) {
		cctx, cancel := context.WithCancel(context.WithoutCancel(root))
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := run(cctx); err != nil {
				fail(fmt.Errorf("%s: %w", name, err))
			} else if cctx.Err() == nil {
				fail(fmt.Errorf("%s stopped unexpectedly", name))
			}
		})
		return func() { cancel(); wg.Wait() }
	}
	stopZDS := start("ztunnel server", func(ctx context.Context) error {
		zdsServing.Store(true)
		defer zdsServing.Store(false)
		return server.Serve(ctx)
	})
	stopAPI := func() {}
	if api != nil {
		stopAPI = start("API watchers", func(ctx context.Context) error {
			api.run(ctx, core)
			return nil
		})
		api.waitForSync(root, logger)
	}
	stopCheckpoint := start("checkpoint", func(ctx context.Context) error {
		runCheckpointer(ctx, cfg.StateDir, core)
		return nil
	})
	stopNRI := start("NRI plugin", plugin.Run)
	logger.Info("meshlet started", "node", cfg.NodeName, "mode", cfg.Mode, "nriSocket", cfg.NRI.SocketPath,
		"ztunnelSocket", server.Addr(), "redirect", cfg.Redirect.Backend, "standalone", cfg.Standalone)

	<-root.Done()
	cause := context.Cause(root)
	logger.Info("meshlet stopping", "cause", cause)
	stopNRI()
	stopAPI()
	stopCheckpoint() // writes the final state
	stopZDS()
	if ctx.Err() != nil {
		return nil // asked to stop: a clean shutdown
	}
	return cause
}
