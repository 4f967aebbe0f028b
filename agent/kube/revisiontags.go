package kube

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshlet/meshlet/agent/policy"
)

// RevisionTagWatch follows Istio's revision tags: each is a
// MutatingWebhookConfiguration labelled policy.TagLabel=<tag> and
// policy.RevisionLabel=<revision> (istioctl tag set, or Istio's chart's
// revisionTags), the convention Istio's own tag watcher reads. Only those
// webhooks are listed and watched (a label selector).
type RevisionTagWatch struct {
	inf    cache.SharedIndexInformer
	lister listersv1.MutatingWebhookConfigurationLister
	start  func(<-chan struct{})
}

// WatchRevisionTags prepares the informer; changed is called whenever a
// tag's webhook is added, changed or deleted (Tags reads them all). Start
// runs it.
func WatchRevisionTags(client kubernetes.Interface, changed func()) *RevisionTagWatch {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = policy.TagLabel }))
	hooks := f.Admissionregistration().V1().MutatingWebhookConfigurations()
	inf := hooks.Informer()
	// Only the labels are read: the rest (webhooks, CA bundles) is not
	// kept.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if h, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
				Name: h.Name, Labels: h.Labels, ResourceVersion: h.ResourceVersion}}, nil
		}
		return obj, nil
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	return &RevisionTagWatch{inf: inf, lister: hooks.Lister(), start: f.Start}
}

// Start runs the informer until ctx ends.
func (w *RevisionTagWatch) Start(ctx context.Context) { w.start(ctx.Done()) }

// WaitForSync waits for the informer's first list, or ctx.
func (w *RevisionTagWatch) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
		return fmt.Errorf("revision tags (MutatingWebhookConfigurations labelled %s) not listed: %w", policy.TagLabel, context.Cause(ctx))
	}
	return nil
}

// Synced reports whether the informer has listed once.
func (w *RevisionTagWatch) Synced() bool { return w.inf.HasSynced() }

// Tags returns every tag and the revisions its webhooks name, sorted; a
// webhook without a revision label names none.
func (w *RevisionTagWatch) Tags() (policy.RevisionTags, error) {
	hooks, err := w.lister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("revision tags: %w", err)
	}
	tags := policy.RevisionTags{}
	for _, h := range hooks {
		tag, rev := h.Labels[policy.TagLabel], h.Labels[policy.RevisionLabel]
		if tag == "" || rev == "" || slices.Contains(tags[tag], rev) {
			continue
		}
		tags[tag] = append(tags[tag], rev)
		slices.Sort(tags[tag])
	}
	return tags, nil
}
