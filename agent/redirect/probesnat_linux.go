package redirect

import (
	"net/netip"
	"slices"
	"sync"
)

// probeSNAT is the node's probe SNAT state as the redirector changes it.
// It remembers the addresses this process has added and not deleted, so
// that a cleanup of leftovers (Retain, after the runtime listed the
// running pods) never deletes the address of a pod being enrolled at the
// same moment: such a pod is not yet in the list the cleanup was given,
// but its address is added here before it reaches the kernel, and the
// cleanup waits for adds in flight.
type probeSNAT struct {
	host hostSNAT

	// cleanup is held for reading by adds, for writing by Retain.
	cleanup sync.RWMutex

	mu    sync.Mutex
	added map[netip.Addr]struct{}
}

func newProbeSNAT(h hostSNAT) *probeSNAT {
	return &probeSNAT{host: h, added: map[netip.Addr]struct{}{}}
}

// add puts the pod's addresses in the SNAT sets.
func (n *probeSNAT) add(ips []netip.Addr) error {
	n.cleanup.RLock()
	defer n.cleanup.RUnlock()
	n.mu.Lock()
	for _, ip := range ips {
		n.added[ip] = struct{}{}
	}
	n.mu.Unlock()
	if err := n.host.Add(ips); err != nil {
		// Whatever part reached the kernel is left to the next cleanup.
		n.clear(ips)
		return err
	}
	return nil
}

// delete takes the pod's addresses out of the SNAT sets.
func (n *probeSNAT) delete(ips []netip.Addr) error {
	err := n.host.Delete(ips)
	n.clear(ips)
	return err
}

// clear forgets that this process added the addresses.
func (n *probeSNAT) clear(ips []netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ip := range ips {
		delete(n.added, ip)
	}
}

// retain deletes every address that is neither in keep nor added by this
// process since it started.
func (n *probeSNAT) retain(keep []netip.Addr) error {
	n.cleanup.Lock()
	defer n.cleanup.Unlock()
	n.mu.Lock()
	all := slices.Clone(keep)
	for ip := range n.added {
		all = append(all, ip)
	}
	n.mu.Unlock()
	return n.host.Retain(all)
}
