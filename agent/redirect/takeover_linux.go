package redirect

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
)

// takeover removes the rules istio-cni left in the pods meshlet takes over
// from it, once meshlet's own rules are in (see removeIstioRules). It runs
// off the caller's path: a pod is taken over while the runtime waits on a
// listing of its pods (NRI's Synchronize has the same deadline as a hook),
// and a deletion costs the kernel an RCU grace period per pod.
type takeover struct {
	// chains: istio-cni's iptables chains (nft variant) are not this
	// redirector's own rules, and go too.
	chains bool
	// nftables: meshlet's nftables table is not this redirector's own
	// (the iptables backend), and goes too: a pod a previous meshlet
	// programmed with the nftables backend.
	nftables bool
	// slots bounds the removals that run at once.
	slots chan struct{}
	wg    sync.WaitGroup
}

func newTakeover(chains, nftables bool) *takeover {
	return &takeover{chains: chains, nftables: nftables, slots: make(chan struct{}, 4)}
}

// clear removes, in the background, istio-cni's rules from the running pod
// w that was just programmed, and the rules of meshlet's other backend. It
// holds a descriptor of the pod's namespace of its own: the core may close
// w's (a re-program replaces it) while the namespace lives on.
func (t *takeover) clear(logger klog.Logger, w *enroll.Workload) {
	logger = logger.WithValues("pod", klog.KRef(w.Namespace, w.Name), "podUID", w.UID)
	var fd int
	err := w.Netns.WithFd(func(nsFd int) error {
		var err error
		fd, err = unix.FcntlInt(uintptr(nsFd), unix.F_DUPFD_CLOEXEC, 0)
		return err
	})
	if err != nil {
		if !errors.Is(err, netns.ErrClosed) {
			logger.Error(err, "Looking for rules istio-cni left in a pod meshlet took over")
		}
		return
	}
	t.wg.Go(func() {
		defer unix.Close(fd)
		t.slots <- struct{}{}
		defer func() { <-t.slots }()
		removed, err := removeIstioRules(fd, t.chains)
		switch {
		case err != nil:
			logger.Error(err, "Removing the rules istio-cni left in a pod meshlet took over; meshlet's rules are in, so the pod stays redirected to ztunnel")
		case len(removed) > 0:
			logger.Info("Took a pod over from istio-cni: its rules removed, meshlet's in place", "removed", removed)
		}
		if !t.nftables {
			return
		}
		if err := removeNftables(fd); err != nil {
			logger.Error(err, "Removing the nftables rules of a previous meshlet's backend; this meshlet's rules are in, so the pod stays redirected to ztunnel")
		}
	})
}

// wait returns once every removal started has ended.
func (t *takeover) wait() { t.wg.Wait() }
