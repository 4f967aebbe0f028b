package cri

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/meshlet/meshlet/agent/enroll"
)

// infoKey is the key of the verbose PodSandboxStatus info map that both
// containerd and CRI-O fill with a JSON document.
const infoKey = "info"

// sandboxInfo is the part of that document meshlet reads. containerd 2.x
// writes its SandboxInfo (internal/cri/server/podsandbox/types): the
// sandbox's OCI runtimeSpec and sandboxMetadata with NetNSPath; CRI-O
// writes {image, pid, runtimeSpec} (server/sandbox_status.go,
// createSandboxInfo), only runtimeSpec when it drops the infra container.
// Only these fields are decoded, so the rest of either shape cannot make
// the decoding fail.
type sandboxInfo struct {
	RuntimeSpec *struct {
		Linux *struct {
			Namespaces []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	} `json:"runtimeSpec"`
	// containerd's sandboxstore.Metadata marshals itself versioned,
	// {"Version": "v1", "Metadata": {"NetNSPath": ...}}, without JSON tags.
	SandboxMetadata *struct {
		Metadata struct {
			NetNSPath string `json:"NetNSPath"`
		} `json:"Metadata"`
	} `json:"sandboxMetadata"`
}

// errNoNetns: a pod-network sandbox whose network namespace the runtime
// did not name; it cannot be enrolled.
var errNoNetns = errors.New("the runtime reports no network namespace path for a pod-network sandbox")

// podFromStatus translates a sandbox's verbose status into the core's Pod,
// as nriplugin does from an NRI sandbox: host network ⇔ no netns path, IPs
// unmapped. Host network is read from the namespace mode, not inferred from
// a missing path: CRI-O pins the host's namespace for a host-network pod and
// names it in the spec. It returns the IPs it could not parse (the pod is
// kept, as NRI keeps it) and an error when the pod cannot be enrolled.
func podFromStatus(st *runtimeapi.PodSandboxStatus, info map[string]string) (enroll.Pod, []string, error) {
	md := st.GetMetadata()
	p := enroll.Pod{
		UID:            md.GetUid(),
		SandboxID:      st.GetId(),
		Name:           md.GetName(),
		Namespace:      md.GetNamespace(),
		Labels:         st.GetLabels(),
		Annotations:    st.GetAnnotations(),
		RuntimeHandler: st.GetRuntimeHandler(),
		HostNetwork:    st.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE,
	}
	if p.UID == "" {
		return p, nil, errors.New("the runtime reports no pod UID")
	}
	var bad []string
	ips := []string{st.GetNetwork().GetIp()}
	for _, a := range st.GetNetwork().GetAdditionalIps() {
		ips = append(ips, a.GetIp())
	}
	for _, s := range ips {
		if s == "" { // containerd reports no IP for a host-network pod
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			bad = append(bad, s)
			continue
		}
		p.IPs = append(p.IPs, ip.Unmap())
	}
	// Sorted, as meshlet's CNI server records them from an ADD: the pod's
	// record then matches and a restarted meshlet adopts the pod.
	slices.SortFunc(p.IPs, netip.Addr.Compare)
	if p.HostNetwork {
		return p, bad, nil
	}
	path, err := netnsPath(info)
	if err != nil {
		return p, bad, err
	}
	p.NetnsPath = path
	return p, bad, nil
}

// netnsPath finds the sandbox's network namespace in the verbose info: the
// runtimeSpec's network namespace (the path runc joined; both runtimes),
// else containerd's sandboxMetadata.Metadata.NetNSPath.
func netnsPath(info map[string]string) (string, error) {
	raw, ok := info[infoKey]
	if !ok {
		return "", fmt.Errorf("%w (no %q in the verbose status)", errNoNetns, infoKey)
	}
	var si sandboxInfo
	if err := json.Unmarshal([]byte(raw), &si); err != nil {
		return "", fmt.Errorf("decode the verbose status %q: %w", infoKey, err)
	}
	path := ""
	if si.RuntimeSpec != nil && si.RuntimeSpec.Linux != nil {
		for _, ns := range si.RuntimeSpec.Linux.Namespaces {
			if ns.Type == "network" && ns.Path != "" {
				path = ns.Path
				break
			}
		}
	}
	if path == "" && si.SandboxMetadata != nil {
		path = si.SandboxMetadata.Metadata.NetNSPath
	}
	switch {
	case path == "":
		return "", errNoNetns
	case !filepath.IsAbs(path):
		// Opened by the agent, whose working directory is not the
		// runtime's: a relative path would name another file.
		return "", fmt.Errorf("network namespace path %q is not absolute", path)
	}
	return path, nil
}
