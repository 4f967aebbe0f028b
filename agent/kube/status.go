package kube

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/policy"
)

// RedirectionAnnotation tells istiod whether it may send HBONE to the pod.
const RedirectionAnnotation = policy.RedirectionAnnotation

// StatusPatcher implements the core's StatusReporter: Report only records
// the latest wanted status per pod; Run patches it onto the pod's status
// subresource in the background, retrying with backoff, so the runtime hook
// never waits on the API.
type StatusPatcher struct {
	client kubernetes.Interface
	// revision goes with the status, in policy.RevisionAnnotation (none
	// without one): the pod's meshlet tells its own pods by it.
	revision   string
	minBackoff time.Duration
	maxBackoff time.Duration

	mu      sync.Mutex
	pending map[string]*statusItem
	wake    chan struct{}
}

type statusItem struct {
	ref       enroll.PodRef
	status    enroll.RedirectionStatus
	attempt   int
	notBefore time.Time
}

var _ enroll.StatusReporter = (*StatusPatcher)(nil)

// NewStatusPatcher returns a patcher for the meshlet of revision (maybe
// none); run it with Run.
func NewStatusPatcher(client kubernetes.Interface, revision string) *StatusPatcher {
	return &StatusPatcher{client: client, revision: revision, minBackoff: 200 * time.Millisecond, maxBackoff: 30 * time.Second,
		pending: map[string]*statusItem{}, wake: make(chan struct{}, 1)}
}

// Report records the wanted status; it never blocks.
func (p *StatusPatcher) Report(ref enroll.PodRef, st enroll.RedirectionStatus) {
	p.mu.Lock()
	p.pending[ref.UID] = &statusItem{ref: ref, status: st}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Pending is how many pods have a status not yet applied.
func (p *StatusPatcher) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// Run applies statuses until ctx ends.
func (p *StatusPatcher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := p.drain(ctx, logger)
		if next.IsZero() {
			next = time.Now().Add(time.Hour)
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-timer.C:
		}
	}
}

// drain patches every due item and returns when the next retry is due.
func (p *StatusPatcher) drain(ctx context.Context, logger klog.Logger) time.Time {
	now := time.Now()
	p.mu.Lock()
	var due []*statusItem
	var next time.Time
	for _, it := range p.pending {
		if it.notBefore.After(now) {
			if next.IsZero() || it.notBefore.Before(next) {
				next = it.notBefore
			}
			continue
		}
		due = append(due, it)
	}
	p.mu.Unlock()
	for _, it := range due {
		err := p.patch(ctx, it)
		p.mu.Lock()
		if p.pending[it.ref.UID] == it { // not superseded meanwhile
			// NotFound: the pod is gone. Invalid (uid is immutable) or
			// Conflict: the pod with that name is a new one. All: done.
			if err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
				delete(p.pending, it.ref.UID)
			} else {
				it.attempt++
				backoff := min(p.minBackoff<<min(it.attempt-1, 16), p.maxBackoff)
				it.notBefore = time.Now().Add(backoff)
				if next.IsZero() || it.notBefore.Before(next) {
					next = it.notBefore
				}
				logger.V(2).Info("Status patch failed, retrying", "pod", klog.KRef(it.ref.Namespace, it.ref.Name), "err", err, "backoff", backoff)
			}
		}
		p.mu.Unlock()
	}
	return next
}

func (p *StatusPatcher) patch(ctx context.Context, it *statusItem) error {
	var value, revision any // nil removes the annotation
	switch it.status {
	case enroll.RedirectionPending, enroll.RedirectionEnabled:
		value = it.status.String()
		if p.revision != "" {
			revision = p.revision
		}
	}
	// The uid is a precondition: a recreated pod with the same name is not
	// patched with its predecessor's status.
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": it.ref.UID, "annotations": map[string]any{RedirectionAnnotation: value, policy.RevisionAnnotation: revision}}})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := p.client.CoreV1().Pods(it.ref.Namespace).Patch(ctx, it.ref.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: "meshlet"}, "status")
	return err
}
