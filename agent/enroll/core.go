package enroll

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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

// SetDefaults makes d the node's per-pod settings from the next
// enrollment on. Pods already enrolled keep theirs until they are
// converged again (Reevaluate), which re-programs those whose settings
// change.
func (c *Core) SetDefaults(d Settings) { c.defaults.Store(&d) }

// Enroll brings a running pod to the state policy wants: enrolled (rules in
// place, ztunnel acked, netns held) or not. It is synchronous and
// idempotent: the same pod with the same netns is a no-op; another sandbox
// (the kubelet re-created it: an event that starts a sandbox is always
// about the pod's newest) or a new netns releases the old enrollment and
// enrolls the new one. An error with Result.Enrolled false means the pod should be meshed
// and is not, and nothing of the attempt is left behind; with Enrolled
// true, the pod stays enrolled as it was (a change of its rules that
// failed).
func (c *Core) Enroll(ctx context.Context, pod Pod) (Result, error) {
	if pod.UID == "" {
		return Result{}, errors.New("enroll: pod has no UID")
	}
	return c.enroll(ctx, pod, HandoverNow)
}

// EnrollRunning is Enroll for a pod that already runs, found by a listing
// of the runtime's pods rather than a hook: without a proxy connected it is
// registered for the next connection instead of failing, since failing
// would not stop a pod that runs already.
func (c *Core) EnrollRunning(ctx context.Context, pod Pod) (Result, error) {
	if pod.UID == "" {
		return Result{}, errors.New("enroll: pod has no UID")
	}
	return c.enroll(ctx, pod, HandoverDeferred)
}

func (c *Core) enroll(ctx context.Context, pod Pod, h Handover) (Result, error) {
	s, err := c.lockSlot(ctx, pod.UID, true)
	if err != nil {
		return Result{}, &Error{UID: pod.UID, Step: StepResolve, Err: err}
	}
	defer s.unlock()
	replaced := c.replaceSandbox(ctx, s, &pod)
	s.pod = pod
	res, err := c.converge(ctx, s, h)
	if replaced && !res.Enrolled && s.reported != RedirectionRemoved {
		c.report(s, RedirectionRemoved)
	}
	c.noted(ctx, s, h, err)
	return res, err
}

// replaceSandbox releases the pod's enrollment in a sandbox other than
// pod's: the kubelet re-created the sandbox, and the old one is stopping
// or gone. Only node-side state is removed (its rules go with its
// namespace), and ztunnel drops the old workload. It reports whether there
// was one. The slot is locked.
func (c *Core) replaceSandbox(ctx context.Context, s *slot, pod *Pod) bool {
	if s.enrolled == nil || SameSandbox(s.enrolled.SandboxID, pod.SandboxID) {
		return false
	}
	podLogger(ctx, pod).Info("Pod sandbox re-created: releasing the old one", "sandbox", pod.SandboxID, "oldSandbox", s.enrolled.SandboxID)
	if err := c.release(ctx, s, RemoveHostOnly, StateReleased, "sandbox replaced"); err != nil {
		podLogger(ctx, pod).Error(err, "Releasing the old sandbox reported an error; continuing", "oldSandbox", s.enrolled.SandboxID)
	}
	return true
}

// Release takes a stopping pod out of the mesh without entering its netns:
// ztunnel drops it, node-side state goes, the netns fd is closed. Unknown
// pods are a no-op, and so is the stop of a sandbox other than the pod's
// current one (sandboxID: the kubelet stops and removes a replaced sandbox
// while its successor runs; "" matches any). The pod is released even when
// a step reports an error; the error is returned for logging.
//
// A caller whose deadline passes while another operation on the pod runs
// is not kept waiting: the release is done once that operation ends, and
// the caller told so.
func (c *Core) Release(ctx context.Context, uid, sandboxID string) error {
	s, err := c.lockSlot(ctx, uid, false)
	if err != nil {
		return c.later(ctx, uid, sandboxID, "release", c.Release, err)
	}
	if s == nil {
		return nil
	}
	defer s.unlock()
	if !c.current(ctx, s, sandboxID, "release") {
		return nil
	}
	enrolled := s.enrolled != nil
	err = c.release(ctx, s, RemoveHostOnly, StateReleased, "stopped")
	if enrolled {
		// The status outlives the sandbox; a new sandbox of the pod is
		// decided afresh (another revision's meshlet may take it).
		c.report(s, RedirectionRemoved)
	}
	return err
}

// Forget releases the pod if needed and drops everything the core knows
// about it (the runtime removed the sandbox). As Release, it acts only on
// the pod's current sandbox, and does not keep a caller waiting past its
// deadline.
func (c *Core) Forget(ctx context.Context, uid, sandboxID string) error {
	s, err := c.lockSlot(ctx, uid, false)
	if err != nil {
		return c.later(ctx, uid, sandboxID, "forget", c.Forget, err)
	}
	if s == nil {
		return nil
	}
	defer s.unlock()
	if !c.current(ctx, s, sandboxID, "forget") {
		return nil
	}
	return c.forget(ctx, s)
}

// current reports whether an event about sandboxID is about the pod's
// current sandbox (the one the last event that started or listed the pod
// named). The slot is locked.
func (c *Core) current(ctx context.Context, s *slot, sandboxID, what string) bool {
	if SameSandbox(s.pod.SandboxID, sandboxID) {
		return true
	}
	podDebug(ctx, &s.pod, "Ignoring an event for a replaced sandbox of the pod", "op", what, "sandbox", sandboxID, "current", s.pod.SandboxID)
	return false
}

// later runs op on the pod in the background, once the operation that
// holds it ends, for a caller whose deadline passed waiting for it
// (waitErr); the caller gets an error saying so.
func (c *Core) later(ctx context.Context, uid, sandboxID, what string, op func(context.Context, string, string) error, waitErr error) error {
	bg := context.WithoutCancel(ctx)
	go func() {
		if err := op(bg, uid, sandboxID); err != nil {
			klog.FromContext(bg).Error(err, "Deferred operation on a pod failed", "op", what, "podUID", uid, "sandbox", sandboxID)
		}
	}()
	return fmt.Errorf("%s pod %s deferred until the operation running on it ends: %w", what, uid, waitErr)
}

// ForgetUnchanged forgets the pod as Forget does, but only while it is as
// st (from Pods) saw it: same state since the same time. A caller that
// decided from an older look (a listing of the runtime that missed the
// pod) must not drop what changed since, such as a new sandbox of the same
// pod enrolled meanwhile. It reports whether it forgot the pod.
func (c *Core) ForgetUnchanged(ctx context.Context, st PodStatus) (bool, error) {
	s, err := c.lockSlot(ctx, st.UID, false)
	if err != nil || s == nil {
		return false, err
	}
	defer s.unlock()
	if s.state != st.State || !s.since.Equal(st.Since) {
		return false, nil
	}
	return true, c.forget(ctx, s)
}

// forget releases the pod in s (locked) and drops its slot.
func (c *Core) forget(ctx context.Context, s *slot) error {
	uid := s.pod.UID
	err := c.release(ctx, s, RemoveHostOnly, StateReleased, "removed")
	// The view entry goes while the map lock is held: once it is released
	// a new slot for the same UID may be created and published, and must
	// not be unpublished by this Forget.
	c.mu.Lock()
	delete(c.slots, uid)
	s.gone = true
	c.viewMu.Lock()
	delete(c.view, uid)
	c.viewMu.Unlock()
	c.mu.Unlock()
	return err
}

// Reconcile converges to exactly the given set of running pods: each is
// enrolled or not as policy says, and every pod the core knows that is not
// in the set is forgotten. The pods already run, so a missing ztunnel
// defers their handover to its next connection instead of failing them.
// Errors are collected per pod; one failing pod does not stop the others.
//
// pods should hold the sandbox that runs of each pod: a runtime that lists
// a pod's stopped sandboxes too is the adapter's to sort out. Given
// several of one pod anyway, Reconcile keeps the one the pod is in now, or
// else the last listed.
func (c *Core) Reconcile(ctx context.Context, pods []Pod) error {
	pods = c.oneSandboxEach(ctx, pods)
	running := make(map[string]struct{}, len(pods))
	for _, p := range pods {
		running[p.UID] = struct{}{}
	}
	var stale []string
	c.mu.RLock()
	for uid := range c.slots {
		if _, ok := running[uid]; !ok {
			stale = append(stale, uid)
		}
	}
	c.mu.RUnlock()

	errs := c.parallel(len(stale), func(i int) error { return c.Forget(ctx, stale[i], "") })
	errs = append(errs, c.parallel(len(pods), func(i int) error {
		if pods[i].UID == "" {
			return errors.New("reconcile: pod without UID")
		}
		_, err := c.enroll(ctx, pods[i], HandoverDeferred)
		return err
	})...)
	// Every running pod has been seen: a checkpointed record still
	// unmatched belongs to a pod removed while no agent ran. The proxy,
	// which the previous agent had handed it, drops it; dropping the
	// records changes what the checkpoint should say.
	c.mu.Lock()
	gone := make([]string, 0, len(c.checkpointed))
	for uid := range c.checkpointed {
		gone = append(gone, uid)
	}
	clear(c.checkpointed)
	c.mu.Unlock()
	if len(gone) > 0 {
		c.viewMu.Lock()
		c.generation++
		c.viewMu.Unlock()
		errs = append(errs, c.parallel(len(gone), func(i int) error {
			if err := c.ports.Proxy.ForgetInherited(ctx, gone[i]); err != nil {
				return fmt.Errorf("ztunnel del of pod %s, removed while no agent ran: %w", gone[i], err)
			}
			return nil
		})...)
	}
	c.listedOnce.Do(func() { close(c.listed) })
	return errors.Join(errs...)
}

// oneSandboxEach returns pods with one sandbox per pod: of several, the
// pod's current sandbox if listed, else the last.
func (c *Core) oneSandboxEach(ctx context.Context, pods []Pod) []Pod {
	at := make(map[string]int, len(pods))
	out := make([]Pod, 0, len(pods))
	for _, p := range pods {
		j, dup := at[p.UID]
		if !dup {
			at[p.UID] = len(out)
			out = append(out, p)
			continue
		}
		keep, drop := p, out[j]
		if cur := c.CurrentSandbox(p.UID); cur != "" && cur == drop.SandboxID {
			keep, drop = drop, p
		}
		out[j] = keep
		klog.FromContext(ctx).Info("The runtime listed several sandboxes of one pod: keeping one", "pod", klog.KRef(p.Namespace, p.Name),
			"podUID", p.UID, "sandbox", keep.SandboxID, "ignored", drop.SandboxID)
	}
	return out
}

// Listed is closed once the first Reconcile has ended: the core has seen
// every pod the runtime runs, and knows which of the previous agent's
// pods are gone.
func (c *Core) Listed() <-chan struct{} { return c.listed }

// UnmeshAll takes every enrolled pod out of the mesh, its in-pod rules
// removed: meshlet is being uninstalled and was asked to leave no pod
// redirected to a ztunnel that may be going too.
func (c *Core) UnmeshAll(ctx context.Context) error {
	return c.eachPod(ctx, func(s *slot) error {
		return c.release(ctx, s, RemoveAll, StateReleased, "meshlet uninstalled")
	})
}

// Reevaluate re-decides every running pod the core knows (policy inputs
// such as namespace labels changed): pods that now qualify are enrolled,
// pods that no longer do are released with their in-pod rules removed.
func (c *Core) Reevaluate(ctx context.Context) error {
	return c.eachPod(ctx, func(s *slot) error {
		if s.state == StateReleased || s.state == StateReleasing {
			return nil // stopped pods stay stopped
		}
		_, err := c.converge(ctx, s, HandoverDeferred)
		c.noted(ctx, s, HandoverDeferred, err)
		return err
	})
}

// eachPod runs fn, in parallel, on every pod the core knows, each with its
// slot locked; pods gone meanwhile are skipped.
func (c *Core) eachPod(ctx context.Context, fn func(s *slot) error) error {
	c.mu.RLock()
	uids := make([]string, 0, len(c.slots))
	for uid := range c.slots {
		uids = append(uids, uid)
	}
	c.mu.RUnlock()
	errs := c.parallel(len(uids), func(i int) error {
		s, err := c.lockSlot(ctx, uids[i], false)
		if err != nil || s == nil {
			return err
		}
		defer s.unlock()
		return fn(s)
	})
	return errors.Join(errs...)
}

// Status returns the state of one pod. It never waits for an operation
// on the pod: it reads the state last published.
func (c *Core) Status(uid string) (PodStatus, bool) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	v, ok := c.view[uid]
	return v.status, ok
}

// Pods returns the state of every pod the core knows, in no order, as
// last published.
func (c *Core) Pods() []PodStatus {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	out := make([]PodStatus, 0, len(c.view))
	for _, v := range c.view {
		out = append(out, v.status)
	}
	return out
}

// Records returns the record of every enrolled pod, in no order, and the
// generation of that set: it is the same exactly when no record was
// added, replaced or removed since. Records share their IPs slices with
// the core: do not modify them.
func (c *Core) Records() ([]Record, uint64) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	out := make([]Record, 0, len(c.view))
	for _, v := range c.view {
		if v.record != nil {
			out = append(out, *v.record)
		}
	}
	return out, c.generation
}

// Record returns the record of one enrolled pod. Its IPs slice is shared
// with the core: do not modify it.
func (c *Core) Record(uid string) (Record, bool) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	if v := c.view[uid]; v.record != nil {
		return *v.record, true
	}
	return Record{}, false
}

// RecordInNetns returns the record of the enrolled pod in the network
// namespace with the given inode. Its IPs slice is shared with the core:
// do not modify it.
func (c *Core) RecordInNetns(inode uint64) (Record, bool) {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	for _, v := range c.view {
		if v.record != nil && v.record.NetnsInode == inode {
			return *v.record, true
		}
	}
	return Record{}, false
}

// Holds reports whether the pod is enrolled in sandbox sandboxID ("" and
// a record without one match any): by this agent, or by the previous one,
// whose checkpointed record no pod has claimed yet. A running pod it holds
// was enrolled when it started; enrolling it now is an adoption, not a
// late enrollment.
func (c *Core) Holds(uid, sandboxID string) bool {
	if st, ok := c.Status(uid); ok && st.State == StateEnrolled && SameSandbox(st.SandboxID, sandboxID) {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.checkpointed[uid]
	return r != nil && SameSandbox(r.SandboxID, sandboxID)
}

// CurrentSandbox is the sandbox the core has the pod in: the one its
// state names, else the one the previous agent's unclaimed record names
// (right after a restart); "" if neither names one.
func (c *Core) CurrentSandbox(uid string) string {
	if st, ok := c.Status(uid); ok && st.SandboxID != "" {
		return st.SandboxID
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if r := c.checkpointed[uid]; r != nil {
		return r.SandboxID
	}
	return ""
}

// Generation moves whenever what a checkpoint should hold changed: a record
// was added, replaced or removed, or the first Reconcile dropped the
// checkpointed records of pods that are gone. It starts at 0.
func (c *Core) Generation() uint64 {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	return c.generation
}

// EnrolledIPs returns the addresses of every enrolled pod.
func (c *Core) EnrolledIPs() []netip.Addr {
	records, _ := c.Records()
	var ips []netip.Addr
	for _, r := range records {
		ips = append(ips, r.IPs...)
	}
	return ips
}

// publish makes s's current state what readers see. The slot is locked.
func (c *Core) publish(s *slot) {
	v := podView{status: s.status()}
	if s.enrolled != nil {
		v.record = &s.enrolled.Record
	}
	c.viewMu.Lock()
	if c.view[s.pod.UID].record != v.record {
		c.generation++
	}
	c.view[s.pod.UID] = v
	c.viewMu.Unlock()
}

func (s *slot) status() PodStatus {
	st := PodStatus{UID: s.pod.UID, SandboxID: s.pod.SandboxID, Name: s.pod.Name, Namespace: s.pod.Namespace,
		State: s.state, Reason: s.reason, Since: s.since,
		Retries: s.retry.attempts, RetryAt: s.retry.at, LastError: s.retry.lastErr}
	if s.enrolled != nil {
		st.NetnsInode = s.enrolled.NetnsInode
	}
	return st
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

// converge makes the pod in s what policy wants. The slot is locked.
//
// For a starting pod (HandoverNow: a runtime hook) the caller's deadline
// bounds the whole enrollment, not only the steps that wait: it is checked
// before every step that changes something, so the hook fails in its own
// time, with the step it did not reach, and never runs into the runtime's
// timeout (which would start the pod unmeshed). A pod that already runs
// (Reconcile, Reevaluate) is not cut short between steps: failing it early
// would only leave a previous agent's rules in it without a ztunnel that
// knows it; its waits are still bounded by the deadline.
func (c *Core) converge(ctx context.Context, s *slot, h Handover) (Result, error) {
	pod := &s.pod

	info, err := c.ports.Resolver.Resolve(ctx, pod)
	if err != nil {
		return c.fail(ctx, s, StepResolve, err)
	}
	info.Held = s.enrolled != nil || s.checkpointed != nil
	d := c.ports.Policy.Decide(pod, info)
	if !d.Enroll && info.Unknown && info.Held {
		// Decided without the API server (a restart while it is down):
		// the pod stays as this agent, or the previous one, meshed it,
		// with the service account it had, until the source knows.
		podLogger(ctx, pod).Info("Keeping a meshed pod in the mesh: its source could not say whether it still is", "wouldBe", d.Reason)
		d = Decision{Enroll: true, Reason: ReasonKeptUnknown}
		info.ServiceAccount = s.heldServiceAccount()
	}
	if !d.Enroll {
		return c.skip(ctx, s, h, d)
	}
	settings := c.settings(ctx, pod, info)
	if pod.NetnsPath == "" {
		return c.fail(ctx, s, StepNetns, ErrNoNetns)
	}
	ns, err := c.ports.Opener.Open(pod.NetnsPath)
	if errors.Is(err, ErrNodeNetns) && !pod.HostNetwork && (info.HostNetwork == nil || *info.HostNetwork) {
		// A host-network pod whose runtime reports the node's namespace
		// (CRI-O pins it, as it pins a pod's own) rather than none
		// (containerd): decided again, as what it is. Not a pod the API
		// server says has a network of its own: that one fails below.
		pod.HostNetwork = true
		if d = c.ports.Policy.Decide(pod, info); !d.Enroll {
			podDebug(ctx, pod, "Pod shares the node's network namespace: decided as a host-network pod", "netns", pod.NetnsPath, "reason", d.Reason)
			return c.skip(ctx, s, h, d)
		}
	}
	if err != nil {
		return c.fail(ctx, s, StepNetns, err)
	}
	old := s.enrolled
	ipsFromNetns := len(pod.IPs) == 0
	if ipsFromNetns {
		if err := c.podAddrs(ctx, s, ns); err != nil {
			_ = ns.Close()
			return c.fail(ctx, s, StepNetns, err)
		}
	}
	rec := Record{UID: pod.UID, SandboxID: pod.SandboxID, Name: pod.Name, Namespace: pod.Namespace,
		ServiceAccount: info.ServiceAccount, NetnsInode: ns.Inode(), IPs: pod.IPs, Settings: settings}

	// keepRules: only the pod's identity changed, and its rules stay as
	// they are (see keepEnrollment).
	keepRules := false
	if old != nil && old.NetnsInode == rec.NetnsInode {
		// The core has held this namespace open since it enrolled the
		// pod, so no other can have its inode: the same namespace.
		rec.NetnsCookie = old.NetnsCookie
		var keep bool
		if keep, keepRules = c.keepEnrollment(ctx, pod, old, &rec, h); keep {
			// The common case (Synchronize after a restart, the
			// CreateContainer gate, watchers): nothing allocated, nothing
			// changed, and the redirector would install the same rules.
			_ = ns.Close()
			if s.reason != d.Reason {
				// Decided again for another reason (the source now knows
				// the pod it could not say about).
				c.setState(s, StateEnrolled, d.Reason)
			}
			return Result{Enrolled: true, Reason: d.Reason}, nil
		}
	}
	// A namespace without the pod's IPs is not the pod's (a runtime or
	// CNI fault): rules there would capture some other traffic, and
	// ztunnel would serve the pod's identity on the wrong addresses. A
	// running pod the previous agent enrolled in this very sandbox and
	// namespace (its cookie, not only its inode, which a later namespace
	// may reuse) is adopted unchecked: failing it would leave that agent's
	// rules in it with no ztunnel that knows it.
	adopting := false
	if cp := s.checkpointed; cp != nil && cp.SandboxID != "" && cp.NetnsInode == rec.NetnsInode {
		rec.NetnsCookie = c.cookie(ctx, pod, ns)
		adopting = cp.provenSame(&rec)
	}
	if ipsFromNetns || adopting {
		// Read from this namespace: it holds them; or adopted unchecked.
	} else if err := ns.HoldsAddrs(pod.IPs); err != nil {
		_ = ns.Close()
		return c.fail(ctx, s, StepNetns, err)
	}
	if rec.NetnsCookie == 0 {
		// Read with the addresses above, most often: no extra step.
		rec.NetnsCookie = c.cookie(ctx, pod, ns)
	}
	if err := outOfTime(ctx, h); err != nil {
		_ = ns.Close()
		return c.fail(ctx, s, StepRedirect, err)
	}
	want := &Workload{Record: rec, Netns: ns}
	// reprogrammed: the pod's rules change while the proxy's workload
	// stays the same. The redirector rewrites them in place (no moment
	// without rules), and a rewrite that fails leaves the pod as it was:
	// enrolled, its old rules in, the proxy serving it.
	reprogrammed := false
	if old != nil {
		podDebug(ctx, pod, "Pod changed, re-enrolling", "oldNetnsInode", old.NetnsInode, "netnsInode", want.NetnsInode)
		if !keepRules && old.sameIdentity(&want.Record) {
			// Same netns, same identity, new settings: the proxy keeps
			// the pod (the Add below, in the same netns, is a no-op for
			// ztunnel, where a Del would drain the pod and reset its
			// connections).
			reprogrammed = true
		} else {
			// A new netns means a new sandbox: the old one is going away,
			// so only node-side state is removed. A new identity in the
			// same netns: the proxy must drop the old workload (ztunnel
			// takes an Add in a netns it has as a no-op), and the rules
			// come out first unless they stay as they are.
			scope := RemoveHostOnly
			if old.NetnsInode == want.NetnsInode && !keepRules {
				scope = RemoveAll
			}
			if err := c.release(ctx, s, scope, StateReleased, "replaced"); err != nil {
				podLogger(ctx, pod).Error(err, "Releasing the previous enrollment reported an error; continuing")
			}
		}
	}
	if err := outOfTime(ctx, h); err != nil {
		_ = ns.Close()
		return c.fail(ctx, s, StepRedirect, err)
	}

	if !reprogrammed {
		c.setState(s, StatePending, d.Reason)
	}
	var prior *Record
	switch {
	case keepRules || reprogrammed:
		prior = &old.Record
	case s.checkpointed != nil && s.checkpointed.sameRules(&want.Record):
		prior = s.checkpointed
	case s.checkpointed != nil && s.checkpointed.sameAddrs(&want.Record) && c.refused(&want.Record):
		// The redirector would refuse the pod with its settings now (only
		// IPv6 addresses, IPv6 off) and they changed while no agent ran:
		// adopted with the settings its rules were written with, as a
		// running meshlet keeps it.
		want.Settings = s.checkpointed.Settings
		prior = s.checkpointed
	}
	redirection, err := c.ports.Redirector.Apply(ctx, want, prior)
	if err != nil {
		// A failed Apply leaves the pod as prior had it: a re-programmed
		// pod stays enrolled as it was, a previous agent's keeps that
		// agent's rules and handover (its next attempt, a retry for a
		// running pod, adopts it again; its release drops it), and a new
		// one has nothing of the attempt. A pod whose identity changed
		// was released from the proxy above: rules no proxy serves would
		// blackhole its traffic, so they go.
		if keepRules {
			if rerr := c.ports.Redirector.Remove(context.WithoutCancel(ctx), want, RemoveAll); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove the rules of the released identity: %w", rerr))
			}
			c.report(s, RedirectionRemoved)
		}
		_ = ns.Close()
		return c.fail(ctx, s, StepRedirect, err)
	}
	if reprogrammed {
		// The new rules are in; the proxy gets the pod's new workload.
		_ = old.Netns.Close()
		s.enrolled = nil
		c.setState(s, StatePending, d.Reason)
	}
	// One chance: from here the pod's rules are this agent's, and so is its
	// handover (AddWorkload replaces the previous agent's, or the rollback
	// below tells the proxy to drop the pod).
	inherited := s.checkpointed != nil
	s.checkpointed = nil
	want.Redirection = redirection
	c.report(s, RedirectionPending)
	if reprogrammed {
		// The proxy has the pod in this netns: the Add is a no-op for it,
		// and a running pod is never taken out of the mesh for its answer
		// or the caller's deadline.
		err = c.ports.Proxy.AddWorkload(ctx, want, HandoverDeferred)
	} else if err = outOfTime(ctx, h); err == nil {
		err = c.ports.Proxy.AddWorkload(ctx, want, h)
	}
	if err != nil {
		// The caller's deadline may be what failed the add; the rollback
		// must run regardless.
		if rerr := c.ports.Redirector.Remove(context.WithoutCancel(ctx), want, RemoveAll); rerr != nil {
			err = errors.Join(err, fmt.Errorf("rollback redirection: %w", rerr))
		}
		_ = ns.Close()
		if inherited {
			if ferr := c.ports.Proxy.ForgetInherited(ctx, pod.UID); ferr != nil {
				err = errors.Join(err, fmt.Errorf("ztunnel: %w", ferr))
			}
		}
		if !reprogrammed { // failReprogrammed reports it
			c.report(s, RedirectionRemoved)
		}
		return c.failReprogrammed(ctx, s, reprogrammed, StepProxy, err)
	}
	s.enrolled = want
	c.setState(s, StateEnrolled, d.Reason)
	c.report(s, RedirectionEnabled)
	podDebug(ctx, pod, "Pod enrolled", "reason", d.Reason, "netnsInode", want.NetnsInode, "adopted", prior != nil)
	return Result{Enrolled: true, Changed: true, Reason: d.Reason}, nil
}

// keepEnrollment reports whether an enrolled pod, converged again in the
// same network namespace as rec, stays as it is: nothing about it changed
// and the redirector would install the same rules now. A node-wide change
// of the rules (the redirector's account differs: IPv6 turned on or off)
// is made by Reevaluate, not inside a runtime's hook (HandoverNow), which
// must stay short.
//
// A pod the redirector would refuse now (only IPv6 addresses, IPv6 off)
// keeps its rules: a setting that cannot apply to a running pod never
// takes it out of the mesh (a new one is refused). If only its identity
// changed, it is handed to ztunnel again with its rules as they are
// (keepRules); if its settings or addresses changed, it stays as it is.
func (c *Core) keepEnrollment(ctx context.Context, pod *Pod, old *Workload, rec *Record, h Handover) (keep, keepRules bool) {
	account, err := c.ports.Redirector.Account(rec)
	switch {
	case err != nil && old.sameEnrollment(rec):
		podDebug(ctx, pod, "Pod keeps its enrollment: the node's settings would refuse it now", "redirection", old.Redirection, "err", err)
		return true, false
	case err != nil && old.sameRules(rec):
		return false, true
	case err != nil:
		podDebug(ctx, pod, "Pod keeps its enrollment as it is: its settings or addresses changed, and the node's settings would refuse it now",
			"redirection", old.Redirection, "err", err)
		return true, false
	case !old.sameEnrollment(rec):
		return false, false
	case account == old.Redirection:
		return true, false
	case h == HandoverNow:
		podDebug(ctx, pod, "Node settings change the pod's redirection: left to the re-evaluation", "redirection", old.Redirection, "want", account)
		return true, false
	}
	podDebug(ctx, pod, "Node settings changed the pod's redirection", "redirection", old.Redirection, "want", account)
	return false, false
}

// cookie returns the namespace's cookie, or 0 where the kernel has none
// (before Linux 5.14): the record then names the namespace by its sandbox
// and inode, which is said once.
func (c *Core) cookie(ctx context.Context, pod *Pod, ns Netns) uint64 {
	cookie, err := ns.Cookie()
	if err != nil && !c.noCookies.Swap(true) {
		podLogger(ctx, pod).Info("Network namespace cookies cannot be read: records name a namespace by its sandbox and inode", "err", err)
	}
	return cookie
}

// refused reports whether the redirector would refuse a pod with rec's
// addresses and settings now.
func (c *Core) refused(rec *Record) bool {
	_, err := c.ports.Redirector.Account(rec)
	return err != nil
}

// settings resolves the pod's settings: each field from the first source
// that sets it, else the node's default.
func (c *Core) settings(ctx context.Context, pod *Pod, info PodInfo) Settings {
	s := *c.defaults.Load()
	var taken SettingsOverride
	for _, src := range c.ports.Settings {
		o, warnings := src.PodSettings(pod, info)
		for _, w := range warnings {
			podLogger(ctx, pod).Info("Pod setting ignored", "warning", w)
		}
		o.over(&s, &taken)
	}
	return s
}

// outOfTime says why the caller's deadline leaves no room for the next
// step of a starting pod's enrollment, or nil while there is time (or the
// pod already runs: see converge).
func outOfTime(ctx context.Context, h Handover) error {
	if h != HandoverNow || ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrOutOfTime, context.Cause(ctx))
}

// clearLeftovers removes redirection a previous agent may have left in a
// running pod that policy no longer selects (its label changed while
// meshlet was down): rules without a ztunnel that knows the pod would
// blackhole its traffic. Only for pods adopted at start-up (Reconcile); a
// sandbox that is just starting cannot have any. Best effort, logged.
func (c *Core) clearLeftovers(ctx context.Context, pod *Pod) {
	if pod.NetnsPath == "" {
		return
	}
	ns, err := c.ports.Opener.Open(pod.NetnsPath)
	if err != nil {
		podDebug(ctx, pod, "Cannot check a skipped pod for leftover rules", "err", err)
		return
	}
	defer ns.Close()
	w := &Workload{Netns: ns, Record: Record{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace,
		NetnsInode: ns.Inode(), IPs: pod.IPs}}
	if err := c.ports.Redirector.Remove(context.WithoutCancel(ctx), w, RemoveAll); err != nil {
		podLogger(ctx, pod).Error(err, "Removing leftover redirection from a pod outside the mesh")
	}
}

// failReprogrammed is fail for a re-programmed pod whose new workload the
// proxy link could not take (its netns could not be passed on): its new
// rules are already rolled back, and the proxy, which still has the pod,
// drops it.
func (c *Core) failReprogrammed(ctx context.Context, s *slot, reprogrammed bool, step Step, err error) (Result, error) {
	if reprogrammed {
		if derr := c.ports.Proxy.DelWorkload(ctx, s.pod.UID); derr != nil {
			err = errors.Join(err, fmt.Errorf("ztunnel del: %w", derr))
		}
		c.report(s, RedirectionRemoved)
	}
	return c.fail(ctx, s, step, err)
}

// fail records a failed step. Any existing enrollment stays as it was (a
// failed re-resolve must not unmesh a running pod).
func (c *Core) fail(ctx context.Context, s *slot, step Step, err error) (Result, error) {
	e := &Error{UID: s.pod.UID, Step: step, Err: err}
	if s.enrolled == nil {
		c.setState(s, StateFailed, fmt.Sprintf("%s: %v", step, err))
	}
	podDebug(ctx, &s.pod, "Enrollment step failed", "step", step, "err", err)
	return Result{Enrolled: s.enrolled != nil}, e
}

// release tears down the pod's enrollment, if any, and records final. Every
// step runs even if an earlier one fails; errors are joined.
func (c *Core) release(ctx context.Context, s *slot, scope RemoveScope, final State, reason string) error {
	c.clearRetry(s)
	w := s.enrolled
	if w == nil {
		err := c.dropInherited(ctx, s)
		c.setState(s, final, reason)
		return err
	}
	c.setState(s, StateReleasing, reason)
	// Every step runs even when the caller's deadline passes: a ZDS Del
	// that cannot be sent in time goes out in the background, in its turn.
	var errs []error
	if err := c.ports.Proxy.DelWorkload(ctx, w.UID); err != nil {
		errs = append(errs, fmt.Errorf("ztunnel del: %w", err))
	}
	// Without the caller's deadline: rules left behind by a removal cut
	// short would blackhole the pod's traffic once the proxy drops it.
	if err := c.ports.Redirector.Remove(context.WithoutCancel(ctx), w, scope); err != nil {
		errs = append(errs, fmt.Errorf("remove redirection: %w", err))
	}
	if err := w.Netns.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close netns: %w", err))
	}
	s.enrolled = nil
	c.setState(s, final, reason)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release pod %s: %w", w.UID, err)
	}
	return nil
}

// dropInherited tells the proxy to drop a pod the previous agent had
// handed it and this one has not taken over (its checkpointed record), now
// that the pod leaves: it stopped, or is no longer selected. The slot is
// locked.
func (c *Core) dropInherited(ctx context.Context, s *slot) error {
	if s.checkpointed == nil {
		return nil
	}
	s.checkpointed = nil
	if err := c.ports.Proxy.ForgetInherited(ctx, s.pod.UID); err != nil {
		return fmt.Errorf("ztunnel del of pod %s, enrolled by the previous agent: %w", s.pod.UID, err)
	}
	return nil
}

// heldServiceAccount is the service account the pod was meshed with, by
// this agent or the previous one.
func (s *slot) heldServiceAccount() string {
	if s.enrolled != nil {
		return s.enrolled.ServiceAccount
	}
	return s.checkpointed.ServiceAccount
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

// skip records the pod as left out of the mesh (d), releasing what an
// earlier enrollment put in place. The slot is locked.
func (c *Core) skip(ctx context.Context, s *slot, h Handover, d Decision) (Result, error) {
	pod := &s.pod
	changed := s.state != StateSkipped || s.enrolled != nil
	var err error
	if s.enrolled != nil {
		podLogger(ctx, pod).Info("Pod no longer selected for the mesh, releasing", "reason", d.Reason)
		err = c.release(ctx, s, RemoveAll, StateSkipped, d.Reason)
		c.report(s, RedirectionRemoved)
	} else if (s.state == StateUnknown && h == HandoverDeferred || s.checkpointed != nil) && !d.OtherAgent {
		// Found running at start-up, or left as the previous agent meshed
		// it (its adoption failed): rules without a proxy that knows the
		// pod would blackhole its traffic.
		c.clearLeftovers(ctx, pod)
	}
	if derr := c.dropInherited(ctx, s); derr != nil {
		err = errors.Join(err, derr)
	}
	c.setState(s, StateSkipped, d.Reason)
	return Result{Reason: d.Reason, Changed: changed}, err
}

// errNoAddrs is the cause when a pod's source gave no IPs and its
// namespace's eth0 holds none.
var errNoAddrs = errors.New("the pod source gave no IPs and the pod's eth0 holds none")

// podAddrs gives a pod whose source reported no IPs (containerd 1.7's NRI
// events carry none) the addresses its eth0 holds: those it was enrolled
// with (by this meshlet or, per the checkpoint, the previous one) while
// the namespace is the same, else read from it. The first time, the core
// says so. ns.Close is the caller's.
func (c *Core) podAddrs(ctx context.Context, s *slot, ns Netns) error {
	pod := &s.pod
	switch {
	case s.enrolled != nil && s.enrolled.NetnsInode == ns.Inode():
		pod.IPs = s.enrolled.IPs
		return nil
	case s.checkpointed != nil && s.checkpointed.NetnsInode == ns.Inode():
		pod.IPs = s.checkpointed.IPs
		return nil
	}
	if !c.addrsFromNetns.Swap(true) {
		klog.FromContext(ctx).Info("The pod source gives no pod IPs: reading each pod's addresses from eth0 in its network namespace")
	}
	ips, err := ns.PodAddrs()
	if err != nil {
		return err
	}
	if len(ips) == 0 {
		return fmt.Errorf("netns %s: %w", pod.NetnsPath, errNoAddrs)
	}
	pod.IPs = ips
	return nil
}
