package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// dumpAttempts bounds how often an interrupted address dump is taken.
const dumpAttempts = 3

// HoldsAddrs returns an error wrapping ErrAddrsMissing unless every address
// in want is assigned to an interface in the namespace. The addresses are
// read through a netlink socket created in the namespace on RunIn's thread.
func (h *Handle) HoldsAddrs(want []netip.Addr) error {
	if len(want) == 0 {
		return nil
	}
	have, err := h.addrList("")
	if err != nil {
		return err
	}
	assigned := make(map[netip.Addr]bool, len(have))
	var held []string
	for _, a := range have {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			assigned[ip.Unmap()] = true
			if !ip.IsLoopback() { // every pod has them: they tell nothing
				held = append(held, ip.Unmap().String())
			}
		}
	}
	var missing []string
	for _, ip := range want {
		if !assigned[ip.Unmap().WithZone("")] {
			missing = append(missing, ip.String())
		}
	}
	if len(missing) > 0 {
		// What it does hold tells a namespace that is not the pod's from
		// one whose interfaces are not configured yet.
		if len(held) == 0 {
			held = []string{"none"}
		}
		return fmt.Errorf("netns %s (inode %d): %w: %s (it holds: %s)", h.path, h.inode, ErrAddrsMissing,
			strings.Join(missing, ", "), strings.Join(held, ", "))
	}
	return nil
}

// PodInterface is the interface whose addresses are a pod's IPs: the one
// the runtime asks CNI to set up, and the one its CRI reports the pod's
// IPs from.
const PodInterface = "eth0"

// PodAddrs returns a pod's IPs as its namespace holds them: the global
// unicast addresses on PodInterface that are settled (not tentative,
// failed, deprecated, temporary or secondary), IPv4 first, in the
// kernel's order. For runtimes whose events carry no pod IPs.
func (h *Handle) PodAddrs() ([]netip.Addr, error) {
	have, err := h.addrList(PodInterface)
	if err != nil {
		return nil, err
	}
	const unsettled = unix.IFA_F_TENTATIVE | unix.IFA_F_DADFAILED | unix.IFA_F_DEPRECATED | unix.IFA_F_TEMPORARY
	var v4, v6 []netip.Addr
	for _, a := range have {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Flags&unsettled != 0 {
			continue
		}
		ip = ip.Unmap()
		if !ip.IsGlobalUnicast() {
			continue
		}
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	return append(v4, v6...), nil
}

// addrList dumps the addresses of the namespace's interface ifname (every
// interface's if ""), through a netlink socket created in it on RunIn's
// thread.
func (h *Handle) addrList(ifname string) ([]netlink.Addr, error) {
	var have []netlink.Addr
	err := h.WithFd(func(fd int) error {
		var nh *netlink.Handle
		err := RunIn(fd, func() error {
			var err error
			if nh, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
				return err
			}
			// On the way, for the enrollment's record (Cookie). A kernel
			// without cookies still has addresses: the dump goes on, and
			// Cookie says why there is none.
			_ = h.readCookie()
			return nil
		})
		if nh != nil {
			// Also when RunIn failed after making it (switching back).
			defer nh.Close()
		}
		if err != nil {
			return fmt.Errorf("netlink handle in netns: %w", err)
		}
		var link netlink.Link
		if ifname != "" {
			if link, err = nh.LinkByName(ifname); err != nil {
				return fmt.Errorf("interface %s: %w", ifname, err)
			}
		}
		// A dump the kernel interrupts (an address changed meanwhile, as
		// at a sandbox's start) is taken again.
		for range dumpAttempts {
			if have, err = nh.AddrList(link, netlink.FAMILY_ALL); !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns %s (inode %d): list addresses: %w", h.path, h.inode, err)
	}
	return have, nil
}
