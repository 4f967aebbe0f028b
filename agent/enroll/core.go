package enroll

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Ports are everything the core drives. All fields but Settings are
// required.
type Ports struct {
	Resolver PodInfoResolver
	Policy   Policy
	// Settings are the sources of per-pod settings, highest precedence
	// first (see SettingsSource). None: every pod gets Config.Defaults.
	Settings   []SettingsSource
	Opener     NetnsOpener
	Redirector Redirector
	Proxy      ProxyLink
	Status     StatusReporter
}

func (p Ports) validate() error {
	var missing []string
	for _, port := range []struct {
		name string
		set  bool
	}{
		{"Resolver", p.Resolver != nil}, {"Policy", p.Policy != nil}, {"Opener", p.Opener != nil},
		{"Redirector", p.Redirector != nil}, {"Proxy", p.Proxy != nil}, {"Status", p.Status != nil},
	} {
		if !port.set {
			missing = append(missing, port.name)
		}
	}
	for i, src := range p.Settings {
		if src == nil {
			missing = append(missing, fmt.Sprintf("Settings[%d]", i))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("enroll: missing ports %v", missing)
	}
	return nil
}

// Config is the core's own configuration.
type Config struct {
	// Defaults are the node's per-pod settings: what a pod gets where no
	// settings source says otherwise.
	Defaults Settings
	// Checkpointed are the records of the pods a previous agent on this
	// node had enrolled (its checkpoint). A pod that comes back with the
	// same network namespace, addresses and settings is handed to the
	// redirector with its record, to keep its rules instead of rewriting
	// them. The first Reconcile drops the records of pods that are gone.
	Checkpointed []Record
	// Retried, if set, is told of every failed convergence of a running
	// pod (see RunRetries).
	Retried RetryObserver
}

// Core is the enrollment state machine for one node.
type Core struct {
	ports Ports
	// defaults are the node's per-pod settings (Config.Defaults), which
	// SetDefaults changes while pods enroll.
	defaults atomic.Pointer[Settings]
	// parallelism bounds Reconcile and Reevaluate fan-out.
	parallelism int
	now         func() time.Time

	mu    sync.RWMutex
	slots map[string]*slot
	// checkpointed holds the records not yet matched to a pod; each is
	// moved into its pod's slot when the slot is created. Guarded by mu.
	checkpointed map[string]*Record

	// view is what readers (metrics, the checkpoint writer, the runtime
	// adapters' status checks) see, so that they never wait behind a pod's
	// lock, which an enrollment holds for as long as the runtime's hook.
	// A pod's entry is republished under its lock at every transition.
	viewMu sync.Mutex
	view   map[string]podView
	// generation counts changes to the set of published records: the
	// checkpoint writer rewrites the file only when it moved.
	generation uint64

	// addrsFromNetns: a pod's IPs were read from its namespace (podAddrs),
	// which is logged once.
	addrsFromNetns atomic.Bool
	// noCookies: a namespace's cookie could not be read, which is logged
	// once.
	noCookies atomic.Bool

	// listed is closed when the first Reconcile ends: the core has seen
	// every running pod.
	listed     chan struct{}
	listedOnce sync.Once

	// retrying holds the running pods waiting for a retry (RunRetries):
	// pod UID → when. retryWake tells RunRetries of a new one.
	retryMu   sync.Mutex
	retrying  map[string]time.Time
	retryWake chan struct{}
	retried   RetryObserver
}

// podView is one pod as readers see it. record points into the pod's
// enrollment, which is never modified after it is published.
type podView struct {
	status PodStatus
	record *Record
}

// slot is one pod's state. turn serialises every operation on the pod: a
// channel rather than a mutex, so that a runtime hook waits for an
// operation ahead of it (a re-evaluation of the same pod) only until its
// own deadline.
type slot struct {
	turn chan struct{}
	// gone is set when the slot was removed from the map; a caller that
	// locked a stale slot retries with a fresh one.
	gone   bool
	pod    Pod
	state  State
	reason string
	since  time.Time
	// enrolled is non-nil exactly when state is StateEnrolled.
	enrolled *Workload
	// checkpointed is the previous agent's record of the pod, until this
	// agent hands the pod to the proxy itself, or lets it go (the proxy
	// is then told to drop it: the previous agent had handed it over).
	checkpointed *Record
	// retry is the pod's pending retry, if its last convergence failed
	// while it ran.
	retry retryState
	// reported is the redirection status last reported for the pod.
	reported RedirectionStatus
}

// report tells the status port the pod's redirection status.
func (c *Core) report(s *slot, st RedirectionStatus) {
	s.reported = st
	c.ports.Status.Report(s.ref(), st)
}

// New returns a core driving ports.
func New(ports Ports, cfg Config) (*Core, error) {
	if err := ports.validate(); err != nil {
		return nil, err
	}
	c := &Core{ports: ports, parallelism: 8, now: time.Now,
		slots: make(map[string]*slot), view: make(map[string]podView),
		checkpointed: make(map[string]*Record, len(cfg.Checkpointed)), listed: make(chan struct{}),
		retrying: make(map[string]time.Time), retryWake: make(chan struct{}, 1), retried: cfg.Retried}
	c.SetDefaults(cfg.Defaults)
	for i := range cfg.Checkpointed {
		r := &cfg.Checkpointed[i]
		c.checkpointed[r.UID] = r
	}
	return c, nil
}

// lockSlot returns the pod's slot, locked; nil if it does not exist and
// create is false. It waits for an operation that holds the slot until
// ctx ends, and then fails, locking nothing.
func (c *Core) lockSlot(ctx context.Context, uid string, create bool) (*slot, error) {
	for {
		c.mu.RLock()
		s := c.slots[uid]
		c.mu.RUnlock()
		if s == nil {
			if !create {
				return nil, nil
			}
			c.mu.Lock()
			if s = c.slots[uid]; s == nil {
				s = &slot{turn: make(chan struct{}, 1), pod: Pod{UID: uid}, checkpointed: c.checkpointed[uid]}
				delete(c.checkpointed, uid)
				c.slots[uid] = s
			}
			c.mu.Unlock()
		}
		if err := s.lock(ctx); err != nil {
			return nil, err
		}
		if !s.gone {
			return s, nil
		}
		s.unlock()
	}
}

// lock takes the slot's turn, waiting until ctx ends at most.
func (s *slot) lock(ctx context.Context) error {
	select {
	case s.turn <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: another operation on the pod was still running: %w", ErrOutOfTime, context.Cause(ctx))
	}
}

func (s *slot) unlock() { <-s.turn }

// setState records a transition and publishes the slot; Since only moves
// when the state or reason changed.
func (c *Core) setState(s *slot, st State, reason string) {
	if s.state != st || s.reason != reason {
		s.state, s.reason, s.since = st, reason, c.now()
	}
	c.publish(s)
}

func (s *slot) ref() PodRef {
	return PodRef{UID: s.pod.UID, Name: s.pod.Name, Namespace: s.pod.Namespace}
}

// parallel runs fn(0..n-1) on at most c.parallelism goroutines and returns
// the non-nil errors.
func (c *Core) parallel(n int, fn func(i int) error) []error {
	if n == 0 {
		return nil
	}
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, c.parallelism) {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	out := errs[:0]
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// podDebug logs at verbosity 2; the pod's logger is only built when that
// verbosity is on (this runs inside the runtime's hook).
func podDebug(ctx context.Context, pod *Pod, msg string, kv ...any) {
	if l := klog.FromContext(ctx).V(2); l.Enabled() {
		l.WithValues("pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID).Info(msg, kv...)
	}
}

// podLogger is built only where something is logged: the no-op path of
// Enroll stays free of logger allocations.
func podLogger(ctx context.Context, pod *Pod) klog.Logger {
	return klog.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, pod.Name), "podUID", pod.UID)
}

// errNoAddrs is the cause when a pod's source gave no IPs and its
// namespace's eth0 holds none.
var errNoAddrs = errors.New("the pod source gave no IPs and the pod's eth0 holds none")
