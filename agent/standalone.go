package agent

import (
	"context"

	"github.com/meshlet/meshlet/agent/enroll"
)

// standaloneResolver serves nodes without an API server connection: the
// service account is reported as enroll.DefaultServiceAccount and namespaces have no labels,
// so only a pod's own labels select it.
type standaloneResolver struct{}

var _ enroll.PodInfoResolver = standaloneResolver{}

func (standaloneResolver) Resolve(context.Context, *enroll.Pod) (enroll.PodInfo, error) {
	return enroll.PodInfo{ServiceAccount: enroll.DefaultServiceAccount}, nil
}
