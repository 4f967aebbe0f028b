package enroll

import (
	"context"

	"k8s.io/klog/v2"
)

// StandaloneResolver serves nodes without an API server connection: the
// service account is reported as DefaultServiceAccount and namespaces have
// no labels, so only a pod's own labels select it.
type StandaloneResolver struct{}

var _ PodInfoResolver = StandaloneResolver{}

// Resolve is the PodInfoResolver port.
func (StandaloneResolver) Resolve(context.Context, *Pod) (PodInfo, error) {
	return PodInfo{ServiceAccount: DefaultServiceAccount}, nil
}

// LogStatus reports redirection status to the log (at verbosity 2), where
// no API server takes the pod's status annotation.
type LogStatus struct{ Logger klog.Logger }

var _ StatusReporter = LogStatus{}

// Report is the StatusReporter port.
func (s LogStatus) Report(pod PodRef, st RedirectionStatus) {
	s.Logger.V(2).Info("Redirection status", "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID, "status", st.String())
}

// StatusReporters reports to each in turn (each queues; none blocks).
type StatusReporters []StatusReporter

var _ StatusReporter = StatusReporters(nil)

// Report is the StatusReporter port.
func (rs StatusReporters) Report(pod PodRef, st RedirectionStatus) {
	for _, r := range rs {
		r.Report(pod, st)
	}
}
