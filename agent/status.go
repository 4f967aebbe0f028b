package agent

import (
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// logStatus reports redirection status to the log; with an API server the
// kube adapter patches the pod's status annotation instead.
type logStatus struct{ logger klog.Logger }

var _ enroll.StatusReporter = logStatus{}

func (s logStatus) Report(pod enroll.PodRef, st enroll.RedirectionStatus) {
	s.logger.V(2).Info("Redirection status", "pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID, "status", st.String())
}
