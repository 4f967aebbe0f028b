package cri

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzPodFromStatus: whatever the runtime reports (its verbose info is
// JSON of its own making, the IPs are strings), the translation never
// panics, and a pod it returns on the pod network has an absolute
// network namespace path.
func FuzzPodFromStatus(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "203.0.113.2", "fd00::2", false)
		f.Add(string(b), "", "", true)
	}
	f.Add(`{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"relative"}]}}}`, "not-an-ip", "::ffff:1.2.3.4", false)
	f.Add(`{"sandboxMetadata":{"Metadata":{"NetNSPath":7}}}`, "1.2.3.4", "", false)
	f.Add(`null`, "", "", false)
	f.Fuzz(func(t *testing.T, info, ip, extra string, hostNetwork bool) {
		mode := runtimeapi.NamespaceMode_POD
		if hostNetwork {
			mode = runtimeapi.NamespaceMode_NODE
		}
		st := sandboxStatus(mode, ip, extra)
		pod, _, err := podFromStatus(st, map[string]string{infoKey: info})
		if err != nil {
			return
		}
		if !pod.HostNetwork && !strings.HasPrefix(pod.NetnsPath, "/") {
			t.Fatalf("pod on the pod network with netns path %q", pod.NetnsPath)
		}
		if pod.HostNetwork && pod.NetnsPath != "" {
			t.Fatalf("host-network pod with netns path %q", pod.NetnsPath)
		}
	})
}
