package cri

import (
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fixture returns testdata/name as a verbose info map (see
// testdata/README.md for where each comes from).
func fixture(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{infoKey: string(b)}
}

// withoutKey returns info with one top-level key of its JSON document
// removed.
func withoutKey(t *testing.T, info map[string]string, key string) map[string]string {
	t.Helper()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(info[infoKey]), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, key)
	b, _ := json.Marshal(doc)
	return map[string]string{infoKey: string(b)}
}

func sandboxStatus(mode runtimeapi.NamespaceMode, ip string, more ...string) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             "sb1",
		Metadata:       &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "shop", Uid: "uid-web"},
		State:          runtimeapi.PodSandboxState_SANDBOX_READY,
		Network:        &runtimeapi.PodSandboxNetworkStatus{Ip: ip},
		Linux:          &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{Network: mode}}},
		Labels:         map[string]string{"app": "web"},
		Annotations:    map[string]string{"note": "x"},
		RuntimeHandler: "runc",
	}
	for _, m := range more {
		st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: m})
	}
	return st
}

const (
	containerdNetns = "/tmp/mlcri1206906673/state/io.containerd.grpc.v1.cri/netns/cni-3b88463d-91df-0492-fc73-f056a5add473"
	crioNetns       = "/var/run/netns/8e3c2a1b-5d4f-4e6a-9b7c-1d2e3f4a5b6c"
)

func TestPodFromStatus(t *testing.T) {
	pod, node := runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_NODE
	cdPod := fixture(t, "containerd-2.4.2-pod-network.json")
	for _, c := range []struct {
		name      string
		st        *runtimeapi.PodSandboxStatus
		info      map[string]string
		netns     string
		host      bool
		ips       []string
		bad       []string
		wantErr   bool
		noNetnsEr bool // the error is errNoNetns
	}{
		{name: "containerd pod network (runtimeSpec)", st: sandboxStatus(pod, "203.0.113.2"), info: cdPod,
			netns: containerdNetns, ips: []string{"203.0.113.2"}},
		{name: "containerd sandboxMetadata when the spec is absent", st: sandboxStatus(pod, "203.0.113.2"),
			info: withoutKey(t, cdPod, "runtimeSpec"), netns: containerdNetns, ips: []string{"203.0.113.2"}},
		// containerd reports no IP for a host-network sandbox.
		{name: "containerd host network", st: sandboxStatus(node, ""), info: fixture(t, "containerd-2.4.2-host-network.json"), host: true},
		{name: "CRI-O pod network (infra container)", st: sandboxStatus(pod, "10.85.0.12"), info: fixture(t, "crio-pod-network.json"),
			netns: crioNetns, ips: []string{"10.85.0.12"}},
		{name: "CRI-O dropped infra container", st: sandboxStatus(pod, "10.85.0.12"), info: fixture(t, "crio-dropped-infra.json"),
			netns: crioNetns, ips: []string{"10.85.0.12"}},
		// CRI-O pins the host's netns too: the mode decides, the path is
		// not the pod's own namespace and is not reported.
		{name: "CRI-O host network", st: sandboxStatus(node, "192.0.2.10"), info: fixture(t, "crio-host-network.json"),
			host: true, ips: []string{"192.0.2.10"}},
		{name: "IPv6 first, IPv4 and v4-mapped additional: sorted, unmapped", st: sandboxStatus(pod, "fd00::5", "203.0.113.7", "::ffff:203.0.113.8"),
			info: cdPod, netns: containerdNetns, ips: []string{"203.0.113.7", "203.0.113.8", "fd00::5"}},
		{name: "unparsable IP reported, pod kept", st: sandboxStatus(pod, "203.0.113.2", "not-an-ip", "fd00::5"),
			info: cdPod, netns: containerdNetns, ips: []string{"203.0.113.2", "fd00::5"}, bad: []string{"not-an-ip"}},
		{name: "no network namespace in the info", st: sandboxStatus(pod, "203.0.113.2"),
			info: withoutKey(t, withoutKey(t, cdPod, "runtimeSpec"), "sandboxMetadata"), wantErr: true, noNetnsEr: true},
		{name: "pod network but the spec has no network namespace", st: sandboxStatus(pod, "203.0.113.2"),
			info: fixture(t, "containerd-2.4.2-host-network.json"), wantErr: true, noNetnsEr: true},
		{name: "no verbose info", st: sandboxStatus(pod, "203.0.113.2"), info: nil, wantErr: true, noNetnsEr: true},
		{name: "verbose info not JSON", st: sandboxStatus(pod, "203.0.113.2"), info: map[string]string{infoKey: "{"}, wantErr: true},
		{name: "no linux status: pod network", st: func() *runtimeapi.PodSandboxStatus {
			st := sandboxStatus(pod, "203.0.113.2")
			st.Linux = nil
			return st
		}(), info: fixture(t, "crio-dropped-infra.json"), netns: crioNetns, ips: []string{"203.0.113.2"}},
		{name: "no UID", st: func() *runtimeapi.PodSandboxStatus {
			st := sandboxStatus(pod, "203.0.113.2")
			st.Metadata.Uid = ""
			return st
		}(), info: cdPod, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, bad, err := podFromStatus(c.st, c.info)
			if (err != nil) != c.wantErr {
				t.Fatalf("error = %v; want error %v", err, c.wantErr)
			}
			if c.noNetnsEr && !errors.Is(err, errNoNetns) {
				t.Errorf("error = %v; want errNoNetns", err)
			}
			if !slices.Equal(bad, c.bad) {
				t.Errorf("bad IPs = %q; want %q", bad, c.bad)
			}
			if err != nil {
				return
			}
			if p.UID != "uid-web" || p.Name != "web" || p.Namespace != "shop" || p.RuntimeHandler != "runc" ||
				!maps.Equal(p.Labels, c.st.Labels) || !maps.Equal(p.Annotations, c.st.Annotations) {
				t.Errorf("identity = %+v", p)
			}
			if p.HostNetwork != c.host || p.NetnsPath != c.netns {
				t.Errorf("HostNetwork, NetnsPath = %v, %q; want %v, %q", p.HostNetwork, p.NetnsPath, c.host, c.netns)
			}
			// The invariant the core relies on, as for NRI's pods.
			if p.HostNetwork != (p.NetnsPath == "") {
				t.Errorf("HostNetwork %v with NetnsPath %q", p.HostNetwork, p.NetnsPath)
			}
			var want []netip.Addr
			for _, s := range c.ips {
				want = append(want, netip.MustParseAddr(s))
			}
			if !slices.Equal(p.IPs, want) {
				t.Errorf("IPs = %v; want %v", p.IPs, want)
			}
			for _, ip := range p.IPs {
				if ip.Is4In6() {
					t.Errorf("IP %v not unmapped", ip)
				}
			}
		})
	}
}
