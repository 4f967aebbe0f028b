package agent

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
)

// apiClients are the API server adapters: informers (the resolver), the
// status patcher and pod events.
type apiClients struct {
	client  kubernetes.Interface
	watcher *kube.Watcher
	status  *kube.StatusPatcher
	events  *kube.Events
}

// syncWait bounds how long start-up waits for the informers before the NRI
// plugin registers anyway: with the API down at boot, pods are still
// served, decided from their own labels (and counted as degraded).
const syncWait = 30 * time.Second

func newAPIClients(cfg Config) (*apiClients, error) {
	rc, err := kube.RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kube.NewClient(rc)
	if err != nil {
		return nil, err
	}
	return &apiClients{
		client:  client,
		watcher: kube.NewWatcher(client, kube.WatcherConfig{NodeName: cfg.NodeName, DataplaneModeLabel: cfg.Policy.DataplaneModeLabel}),
		status:  kube.NewStatusPatcher(client),
		events:  kube.NewEvents(client, cfg.NodeName),
	}, nil
}

// run starts the informers, the status patcher and the re-evaluation on
// label changes, until ctx ends.
func (a *apiClients) run(ctx context.Context, core *enroll.Core) {
	a.watcher.Start(ctx)
	go a.status.Run(ctx)
	a.watcher.RunReevaluation(ctx, core.Reevaluate)
}

// waitForSync holds start-up (and so the NRI registration) until the
// informers have listed once, at most syncWait.
func (a *apiClients) waitForSync(ctx context.Context, logger klog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	if err := a.watcher.WaitForSync(ctx); err != nil {
		logger.Error(err, "Informers not synced; serving the runtime anyway (pods decided from their own labels until the API answers)")
		return
	}
	logger.Info("Informers synced")
}
