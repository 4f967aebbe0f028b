package netns_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestOpenerRefusesTheNodesNetns: a pod whose netns path is the node's own
// namespace, or not a clean absolute path, is refused before any rule is
// written; a pod's own namespace opens. The node is meshlet's netns by
// default, or the one redirect's HostNetnsFd names.
func TestOpenerRefusesTheNodesNetns(t *testing.T) {
	privtest.RequireRoot(t)
	pod := netnstest.New(t)

	own, err := netns.NewOpener(-1, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Open("/proc/self/ns/net"); !errors.Is(err, enroll.ErrNodeNetns) {
		t.Fatalf("opening meshlet's own netns as a pod's: %v, want it refused as the node's", err)
	}
	h, err := own.Open(pod)
	if err != nil {
		t.Fatalf("a pod's netns: %v", err)
	}
	h.(*netns.Handle).Close()

	// With the node's netns given by fd (as redirect's HostNetnsFd), that
	// one is refused and meshlet's own is a namespace like any other.
	nodePath := netnstest.New(t)
	node, err := netns.Open(nodePath)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	other, err := netns.NewOpener(netnstest.Fd(t, node), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(nodePath); !errors.Is(err, enroll.ErrNodeNetns) {
		t.Fatalf("opening the node's netns (by fd) as a pod's: %v, want it refused", err)
	}
	h, err = other.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("with another node netns, meshlet's own: %v", err)
	}
	h.(*netns.Handle).Close()

	for _, bad := range []string{"var/run/netns/p", "/var/run/netns/../../proc/1/ns/net", "/var/run//netns/p", "/var/run/netns/./p", ""} {
		if _, err := own.Open(bad); err == nil || !strings.Contains(err.Error(), "absolute path") {
			t.Errorf("netns path %q: %v, want it refused as not a clean absolute path", bad, err)
		}
	}
}

// TestSkipPodIPCheck: by default a namespace must hold the pod's IPs;
// with --skip-pod-ip-check any namespace is taken to.
func TestSkipPodIPCheck(t *testing.T) {
	privtest.RequireRoot(t)
	pod := netnstest.New(t) // no addresses
	ips := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
	for _, skip := range []bool{false, true} {
		o, err := netns.NewOpener(-1, skip)
		if err != nil {
			t.Fatal(err)
		}
		h, err := o.Open(pod)
		if err != nil {
			t.Fatal(err)
		}
		err = h.HoldsAddrs(ips)
		_ = h.Close()
		if skip != (err == nil) {
			t.Errorf("--skip-pod-ip-check=%v: HoldsAddrs on a namespace without the pod's IP = %v", skip, err)
		}
	}
}
