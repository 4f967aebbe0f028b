package kube

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	NodeName string
	// GetTimeout bounds the direct GET for a pod the informer has not seen
	// yet (a just-bound pod). Keep it well inside the hook's budget.
	GetTimeout time.Duration
	// Debounce groups label changes into one Reevaluate.
	Debounce time.Duration
	// StatusRemovals re-evaluates when an agent removes its status
	// (RedirectionAnnotation) from a pod: with revisions, that status
	// keeps a pod another agent meshed out of this one's reach
	// (policy.ReasonMeshedElsewhere) until it goes.
	StatusRemovals bool
}

// Watcher watches this node's pods and all namespaces.
type Watcher struct {
	cfg      WatcherConfig
	client   kubernetes.Interface
	nsInf    cache.SharedIndexInformer
	podInf   cache.SharedIndexInformer
	nsList   listersv1.NamespaceLister
	podList  listersv1.PodLister
	factory  informers.SharedInformerFactory
	pfactory informers.SharedInformerFactory
	changed  chan struct{}

	// degraded holds pods resolved without the API, with when: when the
	// informer first sees one, it is re-evaluated with its real metadata.
	// A pod the informer never sees (removed before it could) leaves after
	// degradedTTL.
	mu       sync.Mutex
	degraded map[types.UID]time.Time

	// Counters (read by metrics).
	Fallbacks atomic.Int64 // pods resolved by a direct GET
	Degraded  atomic.Int64 // resolutions without the API (pod unknown, API failing)
}

var _ enroll.PodInfoResolver = (*Watcher)(nil)

// NewWatcher builds the informers; Start runs them.
func NewWatcher(client kubernetes.Interface, cfg WatcherConfig) *Watcher {
	if cfg.GetTimeout == 0 {
		cfg.GetTimeout = 300 * time.Millisecond
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	w := &Watcher{cfg: cfg, client: client, changed: make(chan struct{}, 1), degraded: map[types.UID]time.Time{}}
	w.factory = informers.NewSharedInformerFactory(client, 0)
	w.pfactory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	w.nsInf = w.factory.Core().V1().Namespaces().Informer()
	w.nsList = w.factory.Core().V1().Namespaces().Lister()
	w.podInf = w.pfactory.Core().V1().Pods().Informer()
	w.podList = w.pfactory.Core().V1().Pods().Lister()
	// Before Start, as SetTransform requires: it cannot fail here.
	_ = w.nsInf.SetTransform(trimNamespace)
	_ = w.podInf.SetTransform(trimPod)
	_, _ = w.nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { w.notify() },
		// Any label: the node settings may change which ones select
		// (the dataplane-mode label, enablement selectors).
		UpdateFunc: func(o, n any) {
			if !maps.Equal(o.(*corev1.Namespace).Labels, n.(*corev1.Namespace).Labels) {
				w.notify()
			}
		},
	})
	_, _ = w.podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			p := o.(*corev1.Pod)
			w.mu.Lock()
			_, was := w.degraded[p.UID]
			delete(w.degraded, p.UID)
			if static := types.UID(p.Annotations[MirrorAnnotation]); static != "" && p.Spec.NodeName == w.cfg.NodeName {
				_, wasStatic := w.degraded[static]
				was = was || wasStatic
				delete(w.degraded, static)
			}
			w.mu.Unlock()
			if was {
				w.notify()
			}
		},
		UpdateFunc: func(o, n any) {
			op, np := o.(*corev1.Pod), n.(*corev1.Pod)
			if !maps.Equal(op.Labels, np.Labels) || !sameAnnotations(op.Annotations, np.Annotations) ||
				op.Spec.ServiceAccountName != np.Spec.ServiceAccountName ||
				(w.cfg.StatusRemovals && statusRemoved(op.Annotations, np.Annotations)) {
				w.notify()
			}
		},
	})
	return w
}

func (w *Watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Start runs the informers until ctx ends.
func (w *Watcher) Start(ctx context.Context) {
	w.factory.Start(ctx.Done())
	w.pfactory.Start(ctx.Done())
}

// WaitForSync waits for the informers' first list, or ctx.
func (w *Watcher) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), w.nsInf.HasSynced, w.podInf.HasSynced) {
		return fmt.Errorf("informers not synced: %w", context.Cause(ctx))
	}
	return nil
}

// Synced reports whether both informers have listed once.
func (w *Watcher) Synced() bool { return w.nsInf.HasSynced() && w.podInf.HasSynced() }

// RunReevaluation calls reevaluate after label changes (debounced) until
// ctx ends. A change seen before the first sync waits for it.
func (w *Watcher) RunReevaluation(ctx context.Context, reevaluate func(context.Context) error) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.cfg.Debounce):
		}
		if !w.Synced() && w.WaitForSync(ctx) != nil {
			return
		}
		if err := reevaluate(ctx); err != nil {
			logger.Error(err, "Re-evaluating pods after a label change")
		}
	}
}

// Resolve returns the pod's service account, current labels and
// annotations, and its namespace's labels. It never waits on the API
// longer than the GET timeout; without the API it degrades to what it
// knows (the sandbox's labels, the last known namespace labels) and
// counts it.
func (w *Watcher) Resolve(ctx context.Context, pod *enroll.Pod) (enroll.PodInfo, error) {
	apiPod, err := w.podList.Pods(pod.Namespace).Get(pod.Name)
	if err != nil || !w.isPod(apiPod, pod) {
		apiPod, err = w.get(ctx, pod)
	}
	if err != nil {
		w.Degraded.Add(1)
		w.noteDegraded(types.UID(pod.UID), time.Now())
		klog.FromContext(ctx).Info("Pod not known to the API server; deciding from the sandbox's labels",
			"pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID, "err", err)
		info := enroll.PodInfo{ServiceAccount: enroll.DefaultServiceAccount, Unknown: true}
		if ns, err := w.nsList.Get(pod.Namespace); err == nil {
			info.NamespaceLabels = ns.Labels
		}
		return info, nil
	}
	return w.infoOf(apiPod, pod.Namespace), nil
}

// infoOf is a pod's policy inputs from its API object and its namespace's
// labels (the informer's).
func (w *Watcher) infoOf(apiPod *corev1.Pod, namespace string) enroll.PodInfo {
	var info enroll.PodInfo
	if ns, err := w.nsList.Get(namespace); err == nil {
		info.NamespaceLabels = ns.Labels
	}
	info.ServiceAccount = apiPod.Spec.ServiceAccountName
	if info.ServiceAccount == "" {
		info.ServiceAccount = enroll.DefaultServiceAccount
	}
	info.PodLabels, info.PodAnnotations = nonNil(apiPod.Labels), nonNil(apiPod.Annotations)
	info.ResourceClaims = claimNames(apiPod)
	info.HostNetwork = &apiPod.Spec.HostNetwork
	return info
}

// get fetches a pod the informer has not seen (a just-bound pod).
func (w *Watcher) get(ctx context.Context, pod *enroll.Pod) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.GetTimeout)
	defer cancel()
	p, err := w.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod: %w", err)
	}
	if !w.isPod(p, pod) {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
	}
	w.Fallbacks.Add(1)
	return p, nil
}

// MirrorAnnotation is the kubelet's annotation on a static pod's mirror
// pod: the static pod's UID (its configuration's hash), which its sandbox
// carries, where the mirror pod has a UID of its own. SourceAnnotation is
// where the kubelet got a pod from ("api", or "file"/"http" for a static
// pod), on the pod's sandbox.
const (
	MirrorAnnotation = "kubernetes.io/config.mirror"
	SourceAnnotation = "kubernetes.io/config.source"
)

// isPod reports whether apiPod is the pod of the sandbox pod: the pod
// itself, or, for a sandbox the kubelet made from a static pod, that pod's
// mirror on this node. Any pod author may put the mirror annotation on a
// pod: only a static pod's sandbox is matched through it, and only to a
// pod bound to this node.
func (w *Watcher) isPod(apiPod *corev1.Pod, pod *enroll.Pod) bool {
	if string(apiPod.UID) == pod.UID {
		return true
	}
	source := pod.Annotations[SourceAnnotation]
	return source != "" && source != "api" && apiPod.Annotations[MirrorAnnotation] == pod.UID &&
		apiPod.Spec.NodeName == w.cfg.NodeName
}

// degradedTTL is how long a pod resolved without the API waits for the
// informer to see it.
const degradedTTL = time.Hour

// noteDegraded records a pod resolved without the API at now, and lets go
// of those the informer has not seen within degradedTTL: the set stays
// bounded by the pods a node starts in that time.
func (w *Watcher) noteDegraded(uid types.UID, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for u, at := range w.degraded {
		if now.Sub(at) > degradedTTL {
			delete(w.degraded, u)
		}
	}
	w.degraded[uid] = now
}

// claimNames lists the pod's ResourceClaims: those made from its templates
// or named in its spec, and the one the scheduler made for its extended
// resources.
func claimNames(p *corev1.Pod) []string {
	var names []string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			names = append(names, *s.ResourceClaimName)
		}
	}
	for _, c := range p.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			names = append(names, *c.ResourceClaimName)
		}
	}
	if s := p.Status.ExtendedResourceClaimStatus; s != nil && s.ResourceClaimName != "" {
		names = append(names, s.ResourceClaimName)
	}
	return names
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// statusRemoved reports whether an agent's status (RedirectionAnnotation)
// went from a pod between its old and new annotations.
func statusRemoved(old, cur map[string]string) bool {
	_, had := old[RedirectionAnnotation]
	_, has := cur[RedirectionAnnotation]
	return had && !has
}

// sameAnnotations compares two pods' annotations but for meshlet's own
// status (RedirectionAnnotation): reporting a pod's enrollment must not
// re-evaluate every pod on the node.
func sameAnnotations(a, b map[string]string) bool {
	if len(a) == len(b) && maps.Equal(a, b) {
		return true
	}
	for k, v := range a {
		if k != RedirectionAnnotation {
			if bv, ok := b[k]; !ok || bv != v {
				return false
			}
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && k != RedirectionAnnotation {
			return false
		}
	}
	return true
}
