package kube

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// DeleteResourceSlices deletes the node's ResourceSlices of driver: meshlet
// is being uninstalled, and a stopping DRA plugin leaves its slice (tainted)
// for the next meshlet.
func DeleteResourceSlices(ctx context.Context, client kubernetes.Interface, node, driver string) error {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node), fields.OneTermEqualSelector("spec.driver", driver))
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return fmt.Errorf("list the node's ResourceSlices: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if err := client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete ResourceSlice %s: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}
