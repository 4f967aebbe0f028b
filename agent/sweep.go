package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/metrics"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/nriplugin"
)

// removalSweep forgets, in NRI mode, pods the runtime no longer runs whose
// removal never reached meshlet, from listings of the runtime's CRI API.
//
// NRI tells a plugin of a pod's stop and removal, but containerd (2.4.2
// and the 2.x before it) decides whether to send them from state it keeps
// in memory and rebuilds, when a plugin synchronizes, for containers only:
// after containerd restarts, a pod that was running then is stopped and
// removed without StopPodSandbox or RemovePodSandbox reaching any plugin
// (internal/nri/nri.go, needsStopping and syncPlugin). Without the sweep
// such a pod's ztunnel entry, checkpoint record and namespace descriptors
// would outlive it.
type removalSweep struct {
	core     sweptCore
	dial     func(context.Context) (runtimeLister, error)
	interval time.Duration
	absences *cri.Absences
	metrics  interface{ MissedRemovals(n int) }
	// nriRuntime is the runtime NRI connected to, "" before the first
	// connection: a listing from another runtime (a wrong --cri-socket)
	// would take every pod for gone, so its name must match.
	nriRuntime func() string
	// anchored: a listing showed a pod the core knew from NRI, so the CRI
	// socket serves the runtime NRI does. Two runtimes of the same name
	// (a k3s containerd next to the system's) tell apart no other way.
	anchored bool
	// refused says why listings are not used now, "" when they are.
	refused string
}

// sweptCore is the part of the core the sweep drives.
type sweptCore interface {
	Pods() []enroll.PodStatus
	cri.Forgetter
}

var _ sweptCore = (*enroll.Core)(nil)

// runtimeLister lists the runtime's pods and names the runtime.
type runtimeLister interface {
	cnifallback.Lister
	Runtime() (name, version string)
}

var _ runtimeLister = (*cri.Lister)(nil)

// newRemovalSweep returns the sweep for NRI mode: a pod missing from the
// runtime's list of ready sandboxes for twice the interval is gone (NRI
// enrolls a pod a few milliseconds before the runtime marks its sandbox
// ready).
func newRemovalSweep(core sweptCore, plugin *nriplugin.Plugin, m *metrics.Metrics, cfg Config) *removalSweep {
	return &removalSweep{core: core, metrics: m, interval: cfg.CNI.ResyncInterval,
		absences: cri.NewAbsences(2 * cfg.CNI.ResyncInterval),
		dial: func(ctx context.Context) (runtimeLister, error) {
			endpoint, err := cri.Endpoint(ctx, cfg.CNI.CRISocket)
			if err != nil {
				return nil, err
			}
			return cri.Dial(ctx, endpoint)
		},
		nriRuntime: func() string { name, _ := plugin.Runtime(); return name }}
}

// Run lists the runtime's pods every interval until ctx ends.
func (s *removalSweep) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("sweep")
	ctx = klog.NewContext(ctx, logger)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	var lister runtimeLister
	defer func() {
		if lister != nil {
			_ = lister.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if lister == nil {
			dctx, cancel := context.WithTimeout(ctx, cri.ListTimeout)
			l, err := s.dial(dctx)
			cancel()
			if err != nil {
				s.refuse(ctx, fmt.Errorf("the runtime's CRI socket (--cri-socket): %w", err))
				continue
			}
			lister = l
		}
		s.sweep(ctx, lister, time.Now())
	}
}

// sweep takes one listing, begun at now, and forgets the pods gone.
func (s *removalSweep) sweep(ctx context.Context, lister runtimeLister, now time.Time) {
	logger := klog.FromContext(ctx)
	want := s.nriRuntime()
	if name, version := lister.Runtime(); want == "" || name != want {
		s.refuse(ctx, fmt.Errorf("the CRI socket (--cri-socket) serves %s %s, NRI serves %q: its pods are not the ones meshlet enrolls", name, version, want))
		return
	}
	known := s.core.Pods()
	lctx, cancel := context.WithTimeout(ctx, cri.ListTimeout)
	pods, unreadable, err := lister.RunningPods(lctx)
	cancel()
	if err != nil && pods == nil {
		s.refuse(ctx, err)
		return
	}
	if err != nil {
		logger.Error(err, "Some running pods cannot be read: they count as running", "podUIDs", unreadable)
	}
	if !s.anchored {
		if len(known) == 0 {
			return // nothing to forget, nothing to check the listing against
		}
		if !listsAny(known, pods, unreadable) {
			s.refuse(ctx, errors.New("the CRI socket (--cri-socket) lists none of the pods meshlet knows from NRI: it is not the same runtime, or they are all gone (then the next pod enrolled settles it)"))
			return
		}
		s.anchored = true
	}
	s.accept(ctx)
	gone := s.absences.Observe(now, known, pods, unreadable)
	if missed := cri.ForgetGone(ctx, s.core, gone, "its stop and removal"); missed > 0 {
		s.metrics.MissedRemovals(missed)
	}
}

// listsAny is whether the listing shows any of the known pods.
func listsAny(known []enroll.PodStatus, pods []enroll.Pod, unreadable []string) bool {
	uids := make(map[string]bool, len(known))
	for _, st := range known {
		uids[st.UID] = true
	}
	for _, p := range pods {
		if uids[p.UID] {
			return true
		}
	}
	for _, uid := range unreadable {
		if uids[uid] {
			return true
		}
	}
	return false
}

// refuse logs why listings are not used, once per reason.
func (s *removalSweep) refuse(ctx context.Context, why error) {
	if why.Error() == s.refused {
		return
	}
	s.refused = why.Error()
	klog.FromContext(ctx).Error(why, "Cannot list the runtime's pods: a pod whose removal does not reach meshlet stays enrolled until they can be listed")
}

func (s *removalSweep) accept(ctx context.Context) {
	if s.refused != "" {
		klog.FromContext(ctx).Info("Listing the runtime's pods again")
		s.refused = ""
	}
}

// nriSource is NRI mode: the plugin, and the sweep for the removals the
// runtime does not send it.
type nriSource struct {
	*nriplugin.Plugin
	sweep *removalSweep
}

func (s nriSource) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { s.sweep.Run(ctx) })
	return s.Plugin.Run(ctx)
}

var _ podSource = nriSource{}
