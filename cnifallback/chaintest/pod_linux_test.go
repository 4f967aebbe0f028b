package chaintest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/redirect"
)

var podSeq atomic.Uint32

// pod is a sandbox as the runtime hands it to CNI: a fresh network
// namespace and the pod's identity in CNI_ARGS.
type pod struct {
	namespace, name, uid, containerID string
	netns                             string
}

// newPod creates the pod's namespace; it goes when the test ends.
func newPod(t testing.TB, namespace, name string) *pod {
	t.Helper()
	return podAt(namespace, name, netnstest.New(t))
}

func podAt(namespace, name, netnsPath string) *pod {
	n := podSeq.Add(1)
	return &pod{namespace: namespace, name: name, uid: fmt.Sprintf("uid-%d-%d", os.Getpid(), n),
		containerID: fmt.Sprintf("%08x%08x", os.Getpid(), n), netns: netnsPath}
}

// runtimeConf is what containerd and CRI-O pass for a pod sandbox.
func (p *pod) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: p.netns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.namespace}, {"K8S_POD_NAME", p.name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.containerID}, {"K8S_POD_UID", p.uid}}}
}

// inode identifies the pod's namespace.
func (p *pod) inode(t testing.TB) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p.netns, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// in runs fn on a thread locked into the pod's namespace.
func (p *pod) in(t testing.TB, fn func() error) error {
	t.Helper()
	h, err := netns.Open(p.netns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return netnstest.Run(h, fn)
}

// hasTable says whether meshlet's nftables table is in the pod.
func (p *pod) hasTable(t testing.TB) bool {
	t.Helper()
	return p.in(t, func() error { return exec.Command("nft", "list", "table", "inet", redirect.TableName).Run() }) == nil
}

// hasProxyRouting says whether meshlet's policy routing rule is in the pod.
func (p *pod) hasProxyRouting(t testing.TB) bool {
	t.Helper()
	var found bool
	if err := p.in(t, func() error {
		rules, err := netlink.RuleList(unix.AF_INET)
		for _, r := range rules {
			found = found || r.Table == redirect.RouteTable
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// hasLink says whether the pod has the interface.
func (p *pod) hasLink(t testing.TB, name string) bool {
	t.Helper()
	return p.in(t, func() error { _, err := netlink.LinkByName(name); return err }) == nil
}

// held counts the fds this process holds on the pod's namespace.
func (p *pod) held(t testing.TB) int {
	t.Helper()
	held, err := netnstest.HeldNetns(0)
	if err != nil {
		t.Fatal(err)
	}
	return held[p.inode(t)]
}

// nodeSNAT is the node's meshlet table (the probe SNAT set of the pods'
// addresses).
func (n *node) nodeSNAT(t testing.TB) string {
	t.Helper()
	var out []byte
	err := n.in(func() error {
		var err error
		out, err = exec.Command("nft", "list", "table", "inet", redirect.TableName).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("the node's meshlet table: %v\n%s", err, out)
	}
	return string(out)
}

// hasLink says whether the node's namespace has the interface.
func (n *node) hasLink(name string) bool {
	return n.in(func() error { _, err := netlink.LinkByName(name); return err }) == nil
}

// podIP is the pod's address in a chain's result.
func podIP(t testing.TB, r types.Result) netip.Addr {
	t.Helper()
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range res.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
			return a.Unmap()
		}
	}
	t.Fatalf("no address in %v", r)
	return netip.Addr{}
}

// hostVeth is the host side of the pod's veth in a chain's result.
func hostVeth(t testing.TB, r types.Result) string {
	t.Helper()
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range res.Interfaces {
		if strings.HasPrefix(i.Name, "veth") && i.Sandbox == "" {
			return i.Name
		}
	}
	t.Fatalf("no host veth in %v", r)
	return ""
}

// sameResult compares a chain's result with a plugin's output as the
// runtime reads them (the CNI library's types at the result's version):
// byte for byte they may differ in what the library drops (an empty "dns"
// of an older plugin's at 1.0.0).
func sameResult(t testing.TB, got types.Result, want []byte) bool {
	t.Helper()
	w, err := version.NewResult(got.Version(), want)
	if err != nil {
		t.Fatalf("%s: %v", want, err)
	}
	return reflect.DeepEqual(got, w)
}

// printed is a result as the runtime would print it.
func printed(t testing.TB, r types.Result) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := r.PrintTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// resultOf is a recorded plugin's result.
func resultOf(t testing.TB, c call) types.Result {
	t.Helper()
	r, err := version.NewResult(resultVersion(t, c.stdout), c.stdout)
	if err != nil {
		t.Fatalf("%s's output: %v", c.plugin, err)
	}
	return r
}

func resultVersion(t testing.TB, b []byte) string {
	t.Helper()
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.CNIVersion
}
