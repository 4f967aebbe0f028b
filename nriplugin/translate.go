package nriplugin

import (
	"net/netip"

	"github.com/containerd/nri/pkg/api"

	"github.com/meshlet/meshlet/agent/enroll"
)

// podFromSandbox translates an NRI sandbox into the core's Pod. A sandbox
// without a network namespace path shares the host's network.
func podFromSandbox(sb *api.PodSandbox) (enroll.Pod, []string) {
	p := enroll.Pod{
		UID:            sb.GetUid(),
		SandboxID:      sb.GetId(),
		Name:           sb.GetName(),
		Namespace:      sb.GetNamespace(),
		Labels:         sb.GetLabels(),
		Annotations:    sb.GetAnnotations(),
		RuntimeHandler: sb.GetRuntimeHandler(),
		NetnsPath:      netnsPath(sb),
	}
	p.HostNetwork = p.NetnsPath == ""
	var bad []string
	for _, s := range sb.GetIps() {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			bad = append(bad, s)
			continue
		}
		p.IPs = append(p.IPs, ip.Unmap())
	}
	return p, bad
}
