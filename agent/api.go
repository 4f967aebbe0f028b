package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/nodesettings/live"
	"github.com/meshlet/meshlet/agent/policy"
)

// apiClients are the API server adapters: informers (the resolver), the
// status patcher, events, and the node settings' ConfigMaps (watchSettings).
type apiClients struct {
	client  kubernetes.Interface
	watcher *kube.Watcher
	status  *kube.StatusPatcher
	events  *kube.Events
	// settings watches --config-map into node; nil without.
	settings *kube.ConfigMapWatch
	node     *live.Settings
	// tags watches Istio's revision tags into the policy (--revision);
	// nil without.
	tags *revisionTags
}

// watchSettings makes the --config-map ConfigMaps, once run starts their
// informers, feed s.
func (a *apiClients) watchSettings(ctx context.Context, refs []kube.ObjectRef, s *live.Settings) {
	if len(refs) == 0 {
		return
	}
	a.node = s
	a.settings = kube.WatchConfigMaps(a.client, refs, func(i int) { a.observe(ctx, i) })
}

// observe reads the i'th ConfigMap, as it is now, into the node settings.
func (a *apiClients) observe(ctx context.Context, i int) {
	a.node.Observe(ctx, i, func() *kube.ConfigMap { return a.settings.Get(i) })
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
		watcher: kube.NewWatcher(client, kube.WatcherConfig{NodeName: cfg.NodeName, StatusRemovals: cfg.Policy.Revision != ""}),
		status:  kube.NewStatusPatcher(client, cfg.Policy.Revision),
		events:  kube.NewEvents(client, cfg.NodeName),
	}, nil
}

// run starts the informers, the status patcher and the re-evaluation on
// label changes, until ctx ends.
func (a *apiClients) run(ctx context.Context, core *enroll.Core) {
	if a.settings != nil {
		a.settings.Start(ctx)
		go func() {
			// However late the API server answers (start-up waits
			// syncWait at most): the informers report no event for a
			// ConfigMap that does not exist.
			if a.settings.WaitForSync(ctx) == nil {
				a.observeAll(ctx)
			}
		}()
	}
	if a.tags != nil {
		a.tags.watch.Start(ctx)
		go func() {
			if a.tags.watch.WaitForSync(ctx) == nil {
				a.tags.observe(ctx)
			}
		}()
	}
	a.watcher.Start(ctx)
	go a.status.Run(ctx)
	a.watcher.RunReevaluation(ctx, core.Reevaluate)
}

// waitForSync holds start-up (and so the NRI registration) until the
// informers have listed once, at most syncWait.
func (a *apiClients) waitForSync(ctx context.Context, logger klog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	if a.settings != nil {
		if err := a.settings.WaitForSync(ctx); err != nil {
			logger.Error(err, "Node settings' ConfigMaps not read; serving the runtime anyway, with the saved settings until they are")
		} else {
			a.observeAll(ctx)
		}
	}
	if a.tags != nil {
		if err := a.tags.watch.WaitForSync(ctx); err != nil {
			logger.Error(err, "Revision tags not read; serving the runtime anyway, each pod's revision label taken as a revision name until they are (a pod that selects this revision by a tag is not enrolled, and the pods that select none are the revision named default's)")
		} else {
			a.tags.observe(ctx)
		}
	}
	if err := a.watcher.WaitForSync(ctx); err != nil {
		logger.Error(err, "Informers not synced; serving the runtime anyway (pods decided from their own labels until the API answers)")
		return
	}
	logger.Info("Informers synced")
}

// synced is why the API's watches are not ready; nil when they are.
func (a *apiClients) synced() error {
	switch {
	case !a.watcher.Synced():
		return errors.New("pod and namespace informers not synced with the API server")
	case a.tags != nil && !a.tags.watch.Synced():
		return fmt.Errorf("revision tags (MutatingWebhookConfigurations labelled %s) not listed from the API server", policy.TagLabel)
	}
	return nil
}

// observeAll reads every --config-map as it is now.
func (a *apiClients) observeAll(ctx context.Context) {
	for i := range a.settings.Len() {
		a.observe(ctx, i)
	}
}

// revisionTags feeds Istio's revision tags, as the cluster has them, to
// the policy, and asks for a re-evaluation when they change: a running
// pod no agent meshed may now select this revision.
type revisionTags struct {
	watch   *kube.RevisionTagWatch
	policy  *policy.Policy
	reeval  func()
	mu      sync.Mutex
	current policy.RevisionTags
	seen    bool
}

// watchRevisionTags makes Istio's revision tags, once run starts their
// informer, feed pol.
func (a *apiClients) watchRevisionTags(ctx context.Context, pol *policy.Policy) {
	t := &revisionTags{policy: pol, reeval: a.watcher.RequestReevaluation}
	t.watch = kube.WatchRevisionTags(a.client, func() { t.observe(ctx) })
	a.tags = t
}

// observe reads the tags as they are now; a change goes to the policy,
// logged with this revision's tags, and re-evaluates the node's pods (the
// first read too: pods decided before it, the API server late at
// start-up, were decided without the tags).
func (t *revisionTags) observe(ctx context.Context) {
	if !t.watch.Synced() {
		return // the first list's events, one by one: read once it is whole
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	logger := klog.FromContext(ctx)
	tags, err := t.watch.Tags()
	if err != nil {
		logger.Error(err, "Reading the revision tags; keeping the ones read before")
		return
	}
	if t.seen && tags.Equal(t.current) {
		return
	}
	t.policy.SetRevisionTags(tags)
	rev := t.policy.Config().Revision
	logger.Info("Revision tags", "revision", rev, "tagsOfThisRevision", tags.TagsOf(rev),
		"defaultTag", tags[policy.DefaultTag].Revision(), "tags", len(tags))
	for tag, revs := range tags {
		if len(revs) > 1 {
			// Klog's structured API has no warning level.
			logger.Info("Warning: the webhooks of a revision tag name several revisions; its pods go to the first",
				"tag", tag, "revisions", revs, "revision", revs.Revision())
		}
	}
	t.reeval()
	t.current, t.seen = tags, true
}

// draDiscoveryWait bounds how long start-up waits for the API server's
// discovery to say whether it serves DRA.
const draDiscoveryWait = 10 * time.Second

// apiServesDRA is whether meshlet runs its DRA driver (--dra): yes unless
// the API server says it does not serve resource.k8s.io/v1's DeviceClasses,
// ResourceClaims and ResourceSlices in Kubernetes 1.37 or later (a cluster
// older than that, or one with the group turned off), which this says
// once. An API server that does not answer in time gets the driver, which
// waits for it.
func apiServesDRA(ctx context.Context, api *apiClients) bool {
	logger := klog.FromContext(ctx)
	served, why, err := kube.ServesDRA(ctx, api.client, draDiscoveryWait)
	switch {
	case err != nil:
		logger.Info("Cannot tell whether the API server serves DRA: starting the DRA plugin", "err", err)
		return true
	case !served:
		logger.Info("The API server does not serve DRA as meshlet needs it: running without DRA; no mesh device, pods join the mesh by their namespace's label",
			"why", why, "flag", "--dra")
		return false
	}
	return true
}
