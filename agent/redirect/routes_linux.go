package redirect

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/netns"
)

// The policy routing Istio's in-pod mode relies on: packets whose mark
// carries ConnMark are looked up in RouteTable, where every address is
// local via lo, so they are delivered to ztunnel's sockets in the pod.

func netlinkFamily(f Family) int {
	if f == IPv4 {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func proxyRule(f Family) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlinkFamily(f)
	r.Mark = ConnMark
	m := MarkMask
	r.Mask = &m
	r.Priority = RulePriority
	r.Table = RouteTable
	return r
}

func localRoute(f Family, lo int) *netlink.Route {
	dst := &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	if f == IPv6 {
		dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &netlink.Route{Family: netlinkFamily(f), Dst: dst, LinkIndex: lo, Table: RouteTable,
		Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
}

// routing manipulates ip rules and routes through a netlink handle opened
// in the pod's netns (no thread of ours switches namespace).
type routing struct {
	h  *netlink.Handle
	lo int
}

func openRouting(netnsFd int) (*routing, error) {
	// The socket is created on a dedicated locked thread switched into the
	// pod's netns (a socket keeps the namespace it was created in), never
	// on the caller's thread: the library's own NewHandleAt switches the
	// calling thread and ignores a failure to switch back. NETLINK_ROUTE
	// only: a handle for every family costs a socket each.
	var h *netlink.Handle
	err := netns.RunIn(netnsFd, func() error {
		var err error
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlink handle in pod netns: %w", err)
	}
	return &routing{h: h, lo: loopbackIndex}, nil
}

// loopbackIndex is lo's ifindex in every network namespace (the kernel
// creates it first and pins it: LOOPBACK_IFINDEX), which saves a lookup.
const loopbackIndex = 1

func (r *routing) close() { r.h.Close() }

// apply adds the rule and route for each family; present ones are kept.
func (r *routing) apply(families []Family) error {
	for _, f := range families {
		if err := r.h.RouteReplace(localRoute(f, r.lo)); err != nil {
			return fmt.Errorf("route local %s table %d: %w", f, RouteTable, err)
		}
		// The kernel refuses an identical rule with EEXIST: that is the
		// "already there" answer, without listing rules first.
		if err := r.h.RuleAdd(proxyRule(f)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("ip rule fwmark %#x/%#x pref %d lookup %d (%s): %w", ConnMark, MarkMask, RulePriority, RouteTable, f, err)
		}
	}
	return nil
}

func (r *routing) hasRule(f Family) (bool, error) {
	rules, err := r.h.RuleListFiltered(netlinkFamily(f), &netlink.Rule{Priority: RulePriority, Table: RouteTable},
		netlink.RT_FILTER_PRIORITY|netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("list ip rules (%s): %w", f, err)
	}
	for _, rl := range rules {
		if rl.Mark == ConnMark && rl.Mask != nil && *rl.Mask == MarkMask {
			return true, nil
		}
	}
	return false, nil
}

// remove deletes the rule and route of the given families (both when
// none are given), tolerating absence.
func (r *routing) remove(families ...Family) error {
	if len(families) == 0 {
		families = []Family{IPv4, IPv6}
	}
	var errs []error
	for _, f := range families {
		for {
			has, err := r.hasRule(f)
			if err != nil || !has {
				if err != nil && !errors.Is(err, unix.EAFNOSUPPORT) {
					errs = append(errs, err)
				}
				break
			}
			if err := r.h.RuleDel(proxyRule(f)); err != nil {
				errs = append(errs, fmt.Errorf("delete ip rule (%s): %w", f, err))
				break
			}
		}
		if err := r.h.RouteDel(localRoute(f, r.lo)); err != nil && !isAbsent(err) {
			errs = append(errs, fmt.Errorf("delete route table %d (%s): %w", RouteTable, f, err))
		}
	}
	return errors.Join(errs...)
}

func isAbsent(err error) bool {
	return errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EAFNOSUPPORT)
}

// podSockets are the netlink sockets apply writes a pod's namespace
// through, made in a single entry into it: routing, and the nftables
// batch where that is the backend.
type podSockets struct {
	route *netlink.Handle
	nft   int // -1: none
}

func openPodSockets(netnsFd int, nft bool) (*podSockets, error) {
	s := &podSockets{nft: -1}
	err := netns.RunIn(netnsFd, func() error {
		var err error
		if s.route, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
			return fmt.Errorf("netlink handle in pod netns: %w", err)
		}
		if nft {
			s.nft, err = nftSocket()
		}
		return err
	})
	if err != nil {
		s.close() // also what RunIn made before it failed
		return nil, err
	}
	return s, nil
}

func (s *podSockets) routing() *routing { return &routing{h: s.route, lo: loopbackIndex} }

func (s *podSockets) close() {
	if s.route != nil {
		s.route.Close()
	}
	if s.nft >= 0 {
		_ = unix.Close(s.nft)
	}
}

// removeRouting removes the proxy routing of the given families (both
// when none are given) from the netns.
func removeRouting(netnsFd int, families ...Family) error {
	rt, err := openRouting(netnsFd)
	if err != nil {
		return err
	}
	defer rt.close()
	return rt.remove(families...)
}
