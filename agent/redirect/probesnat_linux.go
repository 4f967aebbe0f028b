package redirect

import (
	"net/netip"
	"slices"
	"sync"
)

// probeSNAT is the node's probe SNAT state as the redirector changes it.
//
// An address is held by the pods (their UIDs) whose enrollment added it,
// and leaves the node's sets only when the last of them lets it go: a pod
// that reuses the IP of a stale one (removed while its record lingered)
// keeps its entry when the stale one is forgotten, so the kubelet's
// probes to it are not captured.
//
// The held addresses are also what a cleanup of leftovers (retain, after
// the runtime listed the running pods) keeps besides the list it is
// given: a pod being enrolled at the same moment is not yet in that list,
// but its address is held here before it reaches the kernel, and the
// cleanup waits for adds in flight.
type probeSNAT struct {
	host hostSNAT

	// cleanup is held for reading by adds, for writing by retain.
	cleanup sync.RWMutex

	// mu guards owners, and is held across a delete's kernel write, so
	// that an address a new owner claims is never deleted after the
	// claim by an older owner's release.
	mu     sync.Mutex
	owners map[netip.Addr]map[string]struct{}
}

func newProbeSNAT(h hostSNAT) *probeSNAT {
	return &probeSNAT{host: h, owners: map[netip.Addr]map[string]struct{}{}}
}

// add puts the pod's (owner's) addresses in the SNAT sets.
func (n *probeSNAT) add(owner string, ips []netip.Addr) error {
	n.cleanup.RLock()
	defer n.cleanup.RUnlock()
	n.mu.Lock()
	var claimed []netip.Addr
	for _, ip := range ips {
		held := n.owners[ip]
		if held == nil {
			held = map[string]struct{}{}
			n.owners[ip] = held
		}
		if _, ok := held[owner]; !ok {
			held[owner] = struct{}{}
			claimed = append(claimed, ip)
		}
	}
	n.mu.Unlock()
	if err := n.host.Add(ips); err != nil {
		// The addresses this add claimed are not the pod's after all
		// (those it held before stay); whatever part reached the kernel
		// is left to the next cleanup.
		n.mu.Lock()
		n.disown(owner, claimed)
		n.mu.Unlock()
		return err
	}
	return nil
}

// delete lets the pod's (owner's) addresses go: each leaves the SNAT sets
// unless another pod holds it.
func (n *probeSNAT) delete(owner string, ips []netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	last := n.disown(owner, ips)
	if len(last) == 0 {
		return nil
	}
	return n.host.Delete(last)
}

// disown drops owner's hold on ips and returns those nobody holds now
// (held by nobody before included: a release after a restart). n.mu is
// held.
func (n *probeSNAT) disown(owner string, ips []netip.Addr) (last []netip.Addr) {
	for _, ip := range ips {
		held := n.owners[ip]
		delete(held, owner)
		if len(held) == 0 {
			delete(n.owners, ip)
			last = append(last, ip)
		}
	}
	return last
}

// retain deletes every address that is neither in keep nor held by a pod
// this process enrolled.
func (n *probeSNAT) retain(keep []netip.Addr) error {
	n.cleanup.Lock()
	defer n.cleanup.Unlock()
	n.mu.Lock()
	all := slices.Clone(keep)
	for ip := range n.owners {
		all = append(all, ip)
	}
	n.mu.Unlock()
	return n.host.Retain(all)
}
