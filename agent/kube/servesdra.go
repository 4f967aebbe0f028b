package kube

import (
	"context"
	"fmt"
	"slices"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// draResources are what meshlet's DRA driver uses of resource.k8s.io/v1.
var draResources = []string{"deviceclasses", "resourceclaims", "resourceslices"}

// ServesDRA asks the API server's discovery whether it serves the
// resource.k8s.io/v1 resources meshlet's DRA driver uses. No: the group
// version is not served (a cluster older than 1.34, or one that turned it
// off), or lacks one of them. An API server that does not answer within
// wait is an error: the caller decides.
func ServesDRA(ctx context.Context, client kubernetes.Interface, wait time.Duration) (bool, error) {
	gv := resourcev1.SchemeGroupVersion.String()
	deadline := time.Now().Add(wait)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		list, err := client.Discovery().ServerResourcesForGroupVersion(gv)
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err == nil:
			for _, want := range draResources {
				if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
					return false, nil
				}
			}
			return true, nil
		case time.Now().Add(backoff).After(deadline):
			return false, fmt.Errorf("discovery of %s: %w", gv, err)
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("discovery of %s: %w", gv, context.Cause(ctx))
		case <-time.After(backoff):
		}
	}
}
