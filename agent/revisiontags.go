package agent

import (
	"context"
	"sync"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/policy"
)

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
