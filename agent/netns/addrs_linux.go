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
	var have []netlink.Addr
	err := h.WithFd(func(fd int) error {
		var nh *netlink.Handle
		err := RunIn(fd, func() error {
			var err error
			nh, err = netlink.NewHandle(unix.NETLINK_ROUTE)
			return err
		})
		if nh != nil {
			// Also when RunIn failed after making it (switching back).
			defer nh.Close()
		}
		if err != nil {
			return fmt.Errorf("netlink handle in netns: %w", err)
		}
		// A dump the kernel interrupts (an address changed meanwhile, as
		// at a sandbox's start) is taken again.
		for range dumpAttempts {
			if have, err = nh.AddrList(nil, netlink.FAMILY_ALL); !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("netns %s (inode %d): list addresses: %w", h.path, h.inode, err)
	}
	assigned := make(map[netip.Addr]bool, len(have))
	for _, a := range have {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			assigned[ip.Unmap()] = true
		}
	}
	var missing []string
	for _, ip := range want {
		if !assigned[ip.Unmap().WithZone("")] {
			missing = append(missing, ip.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("netns %s (inode %d): %w: %s", h.path, h.inode, ErrAddrsMissing, strings.Join(missing, ", "))
	}
	return nil
}
