package enroll

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Small fakes of the core's ports: the core's logic is pure, so unit tests
// need no kernel. The real ports are tested against the kernel in their
// own packages.

type fakeResolver struct {
	mu          sync.Mutex
	nsLabels    map[string]map[string]string // namespace → labels
	hostNetwork *bool                        // what the API server says, nil: unknown
	err         error
}

func (r *fakeResolver) Resolve(_ context.Context, pod *Pod) (PodInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return PodInfo{}, r.err
	}
	return PodInfo{ServiceAccount: "sa-" + pod.Name, NamespaceLabels: r.nsLabels[pod.Namespace], HostNetwork: r.hostNetwork}, nil
}

func (r *fakeResolver) setNamespace(ns string, labels map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nsLabels == nil {
		r.nsLabels = map[string]map[string]string{}
	}
	r.nsLabels[ns] = labels
}

// labelPolicy enrolls pods labelled mesh=on or in a namespace labelled
// mesh=on. A pod labelled mesh=other, or in a namespace labelled so, is
// another agent's (Decision.OtherAgent) unless this core holds it
// (PodInfo.Held), as a revision's meshlet decides.
type labelPolicy struct{}

func (labelPolicy) Decide(pod *Pod, info PodInfo) Decision {
	switch {
	case pod.HostNetwork:
		return Decision{Reason: "host-network"}
	case pod.Labels["mesh"] == "other" || info.NamespaceLabels["mesh"] == "other":
		if info.Held {
			return Decision{Enroll: true, Reason: "held"}
		}
		return Decision{Reason: "other-agent", OtherAgent: true}
	case pod.Labels["mesh"] == "on":
		return Decision{Enroll: true, Reason: "pod-label"}
	case info.NamespaceLabels["mesh"] == "on":
		return Decision{Enroll: true, Reason: "namespace-label"}
	}
	return Decision{Reason: "not-selected"}
}

// annotationSettings reads annotation dns=on|off; anything else is left to
// the next source, with a warning.
type annotationSettings struct{}

var on, off = true, false

func (annotationSettings) PodSettings(pod *Pod, _ PodInfo) (SettingsOverride, []string) {
	switch v, ok := pod.Annotations["dns"]; {
	case !ok:
		return SettingsOverride{}, nil
	case v == "on":
		return SettingsOverride{DNSCapture: &on}, nil
	case v == "off":
		return SettingsOverride{DNSCapture: &off}, nil
	default:
		return SettingsOverride{}, []string{"dns=" + v + " is neither on nor off"}
	}
}

// fixedSettings is a source that says the same for every pod (a claim's
// parameters, say).
type fixedSettings SettingsOverride

func (f fixedSettings) PodSettings(*Pod, PodInfo) (SettingsOverride, []string) {
	return SettingsOverride(f), nil
}

type fakeNetns struct {
	inode      uint64
	cookie     uint64
	withoutIPs bool         // the pod's IPs are not in it
	addrs      []netip.Addr // what PodAddrs finds
	opener     *fakeOpener
	once       sync.Once
	closed     atomic.Bool
}

func (n *fakeNetns) Inode() uint64 { return n.inode }

func (n *fakeNetns) Cookie() (uint64, error) {
	if n.cookie == 0 {
		return 0, errors.New("no cookies on this kernel")
	}
	return n.cookie, nil
}

// WithFd refuses after Close, as the real handle does: a core that used a
// namespace it had closed would fail here.
func (n *fakeNetns) WithFd(fn func(int) error) error {
	if n.closed.Load() {
		return errors.New("netns used after Close")
	}
	return fn(int(n.inode))
}

func (n *fakeNetns) HoldsAddrs(ips []netip.Addr) error {
	if n.withoutIPs && len(ips) > 0 {
		return fmt.Errorf("netns inode %d: %v not assigned", n.inode, ips)
	}
	return nil
}

func (n *fakeNetns) PodAddrs() ([]netip.Addr, error) {
	n.opener.mu.Lock()
	defer n.opener.mu.Unlock()
	n.opener.addrReads++
	return n.addrs, nil
}

func (n *fakeNetns) Close() error {
	closed := false
	n.once.Do(func() { closed = true })
	if !closed {
		return errors.New("netns closed twice")
	}
	n.closed.Store(true)
	n.opener.mu.Lock()
	n.opener.open--
	n.opener.mu.Unlock()
	return nil
}

type fakeOpener struct {
	mu         sync.Mutex
	inodes     map[string]uint64       // path → inode; missing path: ENOENT
	withoutIPs map[string]bool         // namespaces that do not hold their pod's IPs
	addrs      map[string][]netip.Addr // what each namespace's PodAddrs finds
	node       map[string]bool         // paths that name the node's own namespace
	// cookies are the namespaces' cookies (default: 1<<32 + inode; 0:
	// the kernel has none).
	cookies   map[string]uint64
	open      int
	addrReads int // PodAddrs calls
}

func (o *fakeOpener) Open(path string) (Netns, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ino, ok := o.inodes[path]
	if !ok {
		return nil, fmt.Errorf("open %s: no such file or directory", path)
	}
	if o.node[path] {
		return nil, fmt.Errorf("netns %s: %w", path, ErrNodeNetns)
	}
	o.open++
	cookie, ok := o.cookies[path]
	if !ok {
		cookie = 1<<32 + ino
	}
	return &fakeNetns{inode: ino, cookie: cookie, withoutIPs: o.withoutIPs[path], addrs: o.addrs[path], opener: o}, nil
}

func (o *fakeOpener) set(path string, inode uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inodes[path] = inode
}

func (o *fakeOpener) openCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.open
}

// recorder logs port calls in order, for asserting sequences.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

type fakeRedirector struct {
	rec       *recorder
	mu        sync.Mutex
	applied   map[string]Settings // uid → settings with rules in place
	failApply error
	inflight  map[string]int
	maxPerPod int
	hook      func(uid string) // called inside Apply, unlocked
	// node stands for the redirector's node-wide settings: part of every
	// account. refuse, when set, is what Account says of any pod.
	node   string
	refuse error
}

func (f *fakeRedirector) account(s Settings) string {
	return fmt.Sprintf("fake dns=%t%s", s.DNSCapture, f.node)
}

func (f *fakeRedirector) Account(r *Record) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return "", f.refuse
	}
	return f.account(r.Settings), nil
}

func (f *fakeRedirector) setNode(node string, refuse error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node, f.refuse = node, refuse
}

func (f *fakeRedirector) Apply(_ context.Context, w *Workload, prior *Record) (string, error) {
	f.mu.Lock()
	f.inflight[w.UID]++
	f.maxPerPod = max(f.maxPerPod, f.inflight[w.UID])
	hook, fail := f.hook, f.failApply
	f.mu.Unlock()
	if hook != nil {
		hook(w.UID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight[w.UID]--
	if err := w.Netns.WithFd(func(int) error { return nil }); err != nil {
		return "", err
	}
	if f.refuse != nil {
		// As the redirector: refused, unless a previous agent programmed
		// the pod (its rules are kept).
		if prior == nil {
			return "", f.refuse
		}
		f.rec.add("keep %s inode=%d", w.UID, w.NetnsInode)
		if fail != nil {
			return "", fail
		}
		return prior.Redirection, nil
	}
	redirection := f.account(w.Settings)
	if prior != nil && prior.Redirection == redirection {
		f.rec.add("adopt %s inode=%d", w.UID, w.NetnsInode)
	} else {
		f.rec.add("apply %s inode=%d dns=%t", w.UID, w.NetnsInode, w.Settings.DNSCapture)
	}
	if fail != nil {
		return "", fail
	}
	f.applied[w.UID] = w.Settings
	return redirection, nil
}

func (f *fakeRedirector) Remove(_ context.Context, w *Workload, scope RemoveScope) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := map[RemoveScope]string{RemoveHostOnly: "host", RemoveAll: "all"}[scope]
	f.rec.add("remove %s inode=%d scope=%s", w.UID, w.NetnsInode, name)
	if scope == RemoveAll {
		delete(f.applied, w.UID)
	}
	return nil
}

func (f *fakeRedirector) has(uid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.applied[uid]
	return ok
}

type fakeProxy struct {
	rec     *recorder
	mu      sync.Mutex
	added   map[string]*Workload
	failAdd error
	// disconnected: no proxy; HandoverNow fails, HandoverDeferred registers.
	disconnected bool
	onDel        func() // called inside DelWorkload, unlocked
}

func (f *fakeProxy) AddWorkload(_ context.Context, w *Workload, h Handover) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.add("add %s inode=%d sa=%s", w.UID, w.NetnsInode, w.ServiceAccount)
	if f.failAdd != nil {
		return f.failAdd
	}
	if f.disconnected && h == HandoverNow {
		return errors.New("no proxy connected")
	}
	f.added[w.UID] = w
	return nil
}

func (f *fakeProxy) DelWorkload(_ context.Context, uid string) error {
	if f.onDel != nil {
		f.onDel()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.add("del %s", uid)
	delete(f.added, uid)
	return nil
}

// ForgetInherited records a Del unless the pod is registered, as the ZDS
// server sends one.
func (f *fakeProxy) ForgetInherited(ctx context.Context, uid string) error {
	f.mu.Lock()
	_, registered := f.added[uid]
	f.mu.Unlock()
	if registered {
		return nil
	}
	return f.DelWorkload(ctx, uid)
}

func (f *fakeProxy) uids() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for uid := range maps.Keys(f.added) {
		out[uid] = true
	}
	return out
}

type fakeStatus struct {
	mu      sync.Mutex
	reports map[string][]RedirectionStatus
}

func (f *fakeStatus) Report(pod PodRef, s RedirectionStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports[pod.UID] = append(f.reports[pod.UID], s)
}

func (f *fakeStatus) of(uid string) []RedirectionStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]RedirectionStatus(nil), f.reports[uid]...)
}

type harness struct {
	core     *Core
	rec      *recorder
	resolver *fakeResolver
	opener   *fakeOpener
	redir    *fakeRedirector
	proxy    *fakeProxy
	status   *fakeStatus
}

func newHarness(t interface{ Fatal(...any) }, checkpointed ...Record) *harness {
	rec := &recorder{}
	h := &harness{
		rec:      rec,
		resolver: &fakeResolver{},
		opener:   &fakeOpener{inodes: map[string]uint64{}, withoutIPs: map[string]bool{}},
		redir:    &fakeRedirector{rec: rec, applied: map[string]Settings{}, inflight: map[string]int{}},
		proxy:    &fakeProxy{rec: rec, added: map[string]*Workload{}},
		status:   &fakeStatus{reports: map[string][]RedirectionStatus{}},
	}
	c, err := New(Ports{Resolver: h.resolver, Policy: labelPolicy{}, Settings: []SettingsSource{annotationSettings{}},
		Opener: h.opener, Redirector: h.redir, Proxy: h.proxy, Status: h.status},
		Config{Defaults: Settings{DNSCapture: true}, Checkpointed: checkpointed})
	if err != nil {
		t.Fatal(err)
	}
	h.core = c
	return h
}

// pod returns a pod with a netns at /netns/<uid> of the given inode, and
// an IP its source gives (10.x.y.z, from the inode).
func (h *harness) pod(uid string, inode uint64, labels map[string]string) Pod {
	path := "/netns/" + uid
	h.opener.set(path, inode)
	ip := netip.AddrFrom4([4]byte{10, byte(inode >> 16), byte(inode >> 8), byte(inode)})
	return Pod{UID: uid, Name: "name-" + uid, Namespace: "default", Labels: labels, NetnsPath: path, IPs: []netip.Addr{ip}}
}

// sandbox returns one sandbox of a pod: its netns at /netns/<sandbox> of
// the given inode, and an IP as pod gives.
func (h *harness) sandbox(uid, sandbox string, inode uint64, labels map[string]string) Pod {
	p := h.pod(uid, inode, labels)
	delete(h.opener.inodes, p.NetnsPath)
	p.SandboxID, p.NetnsPath = sandbox, "/netns/"+sandbox
	h.opener.set(p.NetnsPath, inode)
	return p
}

var meshOn = map[string]string{"mesh": "on"}
