package netns

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/meshlet/meshlet/agent/enroll"
)

// Opener is the core's NetnsOpener port. Beyond the kernel's word that a
// path is a network namespace (Open), it refuses two things: a path that is not absolute and clean (no "..", no
// "//"), and the node's own network namespace (enroll.ErrNodeNetns). The
// second would have meshlet redirect the node's traffic to ztunnel; the
// core takes such a pod for what it is, a host-network pod (CRI-O reports
// the node's namespace, pinned, for those).
type Opener struct {
	node uint64 // the node's netns inode
	// anyIPs hands out namespaces whose HoldsAddrs accepts any address
	// (--skip-pod-ip-check).
	anyIPs bool
}

var (
	_ enroll.NetnsOpener = Opener{}
	_ enroll.Netns       = (*Handle)(nil)
)

// NewOpener identifies the node's network namespace: the one at
// hostNetnsFd (redirect.Config.HostNetnsFd), or meshlet's own when it is
// -1 (the DaemonSet runs on the host network).
func NewOpener(hostNetnsFd int, skipPodIPCheck bool) (Opener, error) {
	if hostNetnsFd >= 0 {
		inode, err := Identify(hostNetnsFd)
		if err != nil {
			return Opener{}, fmt.Errorf("the node's network namespace: %w", err)
		}
		return Opener{node: inode, anyIPs: skipPodIPCheck}, nil
	}
	h, err := Open("/proc/self/ns/net")
	if err != nil {
		return Opener{}, fmt.Errorf("the node's network namespace: %w", err)
	}
	defer h.Close()
	return Opener{node: h.Inode(), anyIPs: skipPodIPCheck}, nil
}

func (o Opener) Open(path string) (enroll.Netns, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, fmt.Errorf("netns path %q: want an absolute path with no . or .. elements", path)
	}
	h, err := Open(path)
	if err != nil {
		return nil, err
	}
	if h.Inode() == o.node {
		_ = h.Close()
		return nil, fmt.Errorf("netns %s (inode %d): %w", path, h.Inode(), enroll.ErrNodeNetns)
	}
	if o.anyIPs {
		return anyIPsNetns{h}, nil
	}
	return h, nil
}

// anyIPsNetns is a namespace taken to hold whatever IPs the runtime
// reports (--skip-pod-ip-check).
type anyIPsNetns struct{ *Handle }

func (anyIPsNetns) HoldsAddrs([]netip.Addr) error { return nil }
