package zds

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/zds/zdspb"
	"github.com/meshlet/meshlet/internal/unixsock"
)

// DefaultSocketPath is where a stock ztunnel looks for the agent.
const DefaultSocketPath = "/var/run/ztunnel/ztunnel.sock"

// DefaultSnapshotHold is Config.SnapshotHold's default: longer than
// start-up's wait for the API server (30 s), which comes before the
// runtime's pods are listed.
const DefaultSnapshotHold = 45 * time.Second

// ErrNoProxy means no ztunnel is connected: the workload cannot be handed
// over, so the pod must not start as if it were meshed.
var ErrNoProxy = errors.New("no ztunnel connected")

// NackError is ztunnel refusing a request.
type NackError struct {
	Request string
	UID     string
	Reason  string
}

func (e *NackError) Error() string {
	return fmt.Sprintf("ztunnel refused %s: %s", e.Request, e.Reason)
}

// Config configures the server.
type Config struct {
	// SocketPath is the Unix socket ztunnel connects to.
	SocketPath string
	// SocketMode is the socket file's permission bits (default 0600: only
	// root-run ztunnel may connect).
	SocketMode fs.FileMode
	// HelloTimeout bounds the wait for ztunnel's ZdsHello (default 5 s).
	HelloTimeout time.Duration
	// AckTimeout bounds the wait for each Ack (default 5 s). A late ack
	// closes the connection.
	AckTimeout time.Duration
	// SnapshotHold bounds how long, after Resume, a connection's
	// SnapshotSent waits for the agent to have listed the runtime's pods
	// (default DefaultSnapshotHold).
	SnapshotHold time.Duration
	// Refused, if set, is told when ztunnel first refuses a running pod's
	// Add (the pod keeps its redirection, and the Add is retried). It
	// must not block.
	Refused func(pod enroll.PodRef, reason string)
}

func (c *Config) setDefaults() {
	if c.SocketPath == "" {
		c.SocketPath = DefaultSocketPath
	}
	if c.SocketMode == 0 {
		c.SocketMode = 0o600
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = 5 * time.Second
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 5 * time.Second
	}
	if c.SnapshotHold == 0 {
		c.SnapshotHold = DefaultSnapshotHold
	}
}

// Server is the ZDS server. It implements enroll.ProxyLink and keeps its own
// registry of workloads (with a dup of each netns fd) to replay to every new
// connection.
//
// ztunnel keeps its proxies across connections and, at a connection's
// SnapshotSent, drains every one the snapshot did not name. So a snapshot
// names every pod ztunnel should go on proxying: the registry's with Add,
// and with Keep those a previous agent handed over that this one has not
// added or deleted yet (Resume); and, while the agent has not yet listed
// the runtime's pods, its SnapshotSent waits (bounded) for the listing.
type Server struct {
	cfg Config
	ln  *net.UnixListener

	mu        sync.Mutex
	workloads map[string]*workload
	// previous are the pods a previous agent handed to ztunnel (Resume)
	// that this one has neither added nor deleted since.
	previous map[string]struct{}
	// listed is closed once the agent has listed the runtime's pods;
	// holdUntil bounds a snapshot's wait for it. nil: no wait.
	listed    <-chan struct{}
	holdUntil time.Time
	conns     []*conn // in connection order: the last one is the newest
	nextID    uint64
	closed    bool
	wg        sync.WaitGroup
	// refused are the running pods whose Add ztunnel refused, retried
	// until it takes them: pod UID → the workload refused, and why.
	refused map[string]refusal
	// life ends with the server: requests sent on behalf of a caller that
	// did not wait for them (bg) run on it.
	life    context.Context
	endLife context.CancelFunc
	bg      sync.WaitGroup
}

// Retries of a running pod's refused Add: ztunnel retries it by itself
// (about every 5 s) while it holds it; meshlet's retries reach a ztunnel
// that does not (a new connection, a restarted ztunnel).
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

var _ enroll.ProxyLink = (*Server)(nil)

// refusal is a refused Add: the workload, and ztunnel's reason.
type refusal struct {
	w      *workload
	reason string
}

// workload is one registry entry. fd is a dup the server owns; -1 once
// retired.
type workload struct {
	uid  string
	info *zdspb.WorkloadInfo

	mu      sync.RWMutex // write-locked to retire; read-locked around a send of fd
	fd      int
	retired bool

	// delivering: a deliver loop follows up on this workload's Add;
	// refusedAgain: another connection refused it meanwhile, so that loop
	// sends it again rather than end. Guarded by the server's mu.
	delivering   bool
	refusedAgain bool
}

func (w *workload) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.retired {
		return
	}
	w.retired = true
	if w.fd >= 0 {
		_ = unix.Close(w.fd)
		w.fd = -1
	}
}

// Listen creates the socket (removing a stale one) with cfg.SocketMode.
// Call Serve to accept connections. A failed Listen removes the
// directories it created for the socket, and only those.
func Listen(cfg Config) (*Server, error) {
	cfg.setDefaults()
	ln, err := unixsock.ListenPacket(cfg.SocketPath, 0o755, cfg.SocketMode)
	if err != nil {
		return nil, fmt.Errorf("zds: %w", err)
	}
	life, endLife := context.WithCancel(context.Background())
	return &Server{cfg: cfg, ln: ln, workloads: make(map[string]*workload), previous: map[string]struct{}{},
		refused: map[string]refusal{}, life: life, endLife: endLife}, nil
}

// takeoverPoll is how often ListenWhenFree tries the socket again.
const takeoverPoll = 100 * time.Millisecond

// ListenWhenFree is Listen, waiting while another process serves the
// socket: the node agent meshlet replaces (istio-cni's, whose socket path
// is the same), which must not have its live socket unlinked. waiting is
// called once, when the wait begins. ztunnel keeps its proxies while no
// agent serves it and redials (backing off to 15 s), so the first
// snapshot it gets from meshlet decides what it keeps: see Resume.
func ListenWhenFree(ctx context.Context, cfg Config, waiting func()) (*Server, error) {
	for waited := false; ; waited = true {
		s, err := Listen(cfg)
		if !errors.Is(err, unixsock.ErrInUse) {
			return s, err
		}
		if !waited && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("zds: waiting for %s to be free: %w", cfg.SocketPath, context.Cause(ctx))
		case <-time.After(takeoverPoll):
		}
	}
}

// Resume tells the server what a previous agent on this node handed to
// ztunnel, before Serve: the UIDs of the pods its checkpoint names. Each
// is named with Keep in every snapshot until this agent adds or deletes
// it, so ztunnel goes on proxying the pod while this agent adopts it (or
// drains it when the agent deletes it: the pod is gone). listed is closed
// once the agent has listed the runtime's pods: until then, and at most
// Config.SnapshotHold from now, a connection's SnapshotSent waits, so that
// a pod the previous agent enrolled after its last checkpoint is named
// too.
func (s *Server) Resume(previous []string, listed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, uid := range previous {
		s.previous[uid] = struct{}{}
	}
	s.listed, s.holdUntil = listed, time.Now().Add(s.cfg.SnapshotHold)
}

// Addr is the socket path.
func (s *Server) Addr() string { return s.cfg.SocketPath }

// Serve accepts ztunnel connections until ctx ends, then closes every
// connection and the socket. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("zds")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		s.shutdown()
	}()
	for {
		uc, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || s.isClosed() {
				s.wg.Wait()
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.shutdown()
			s.wg.Wait()
			return fmt.Errorf("zds: accept: %w", err)
		}
		// A peer that is not root is not ztunnel: it would receive every
		// pod's network namespace.
		if err := unixsock.PeerIsRoot(uc); err != nil {
			logger.Info("Refused a ztunnel connection", "reason", err)
			_ = uc.Close()
			continue
		}
		s.mu.Lock()
		s.nextID++
		c := newConn(uc, s.nextID, s.cfg.AckTimeout, logger)
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(ctx, c)
		}()
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := append([]*conn(nil), s.conns...)
	s.mu.Unlock()
	s.endLife()
	_ = s.ln.Close()
	for _, c := range conns {
		c.close(errors.New("server shutting down"))
	}
}

// Close stops the server (if Serve is not already stopped by its context)
// and releases every netns fd the registry holds.
func (s *Server) Close() error {
	s.shutdown()
	s.bg.Wait()
	s.mu.Lock()
	ws := s.workloads
	s.workloads = make(map[string]*workload)
	s.mu.Unlock()
	for _, w := range ws {
		w.retire()
	}
	return nil
}

// Connections returns how many ztunnel connections are live.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Workloads returns how many workloads the registry holds.
func (s *Server) Workloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.workloads)
}

// handle runs one connection: hello, registration as newest, snapshot
// replay, then it lives until closed.
func (s *Server) handle(ctx context.Context, c *conn) {
	defer s.drop(c)
	logger := c.log
	if err := c.readHello(s.cfg.HelloTimeout); err != nil {
		logger.Info("Closing ztunnel connection: no valid hello", "err", err)
		c.close(err)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.close(errors.New("server shutting down"))
		return
	}
	s.conns = append(s.conns, c)
	snapshot := make([]*workload, 0, len(s.workloads))
	for _, w := range s.workloads {
		snapshot = append(snapshot, w)
	}
	s.mu.Unlock()
	s.wg.Add(1) // handle holds a count, so this never races Wait at zero
	go func() {
		defer s.wg.Done()
		c.readLoop()
	}()

	logger.Info("ztunnel connected, replaying snapshot", "workloads", len(snapshot))
	start := time.Now()
	var nacks int
	replayed := make(map[*workload]bool, len(snapshot))
	for _, w := range snapshot {
		err := c.send(ctx, w)
		var nack *NackError
		switch {
		case err == nil || errors.Is(err, errRetired):
		case errors.As(err, &nack):
			// ztunnel keeps a refused Add pending and retries it itself;
			// meshlet retries it too, as a running pod's handover.
			nacks++
			s.followUp(c, w, err)
		default:
			logger.Info("Snapshot replay aborted", "podUID", w.uid, "err", err)
			c.close(err)
			<-c.done
			return
		}
		replayed[w] = true
	}
	listed, held := s.awaitListing(ctx, c)
	if c.cause() != nil {
		<-c.done
		logger.Info("ztunnel disconnected before its snapshot ended", "reason", c.cause())
		return
	}
	kept, err := s.keepUnnamed(ctx, c, replayed)
	if err == nil {
		err = c.request(ctx, outgoing{req: &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_SnapshotSent{SnapshotSent: &zdspb.SnapshotSent{}}}, kind: "snapshot_sent"})
	}
	switch {
	case err != nil:
		logger.Info("Snapshot replay aborted", "err", err)
		c.close(err)
	case !listed:
		logger.Info("Snapshot sent before the runtime's pods were listed: ztunnel drains the pods the previous meshlet enrolled after its last checkpoint",
			"workloads", len(snapshot), "kept", kept, "nacks", nacks, "waited", held, "duration", time.Since(start))
	default:
		logger.Info("Snapshot sent", "workloads", len(snapshot), "kept", kept, "nacks", nacks, "waitedForListing", held, "duration", time.Since(start))
	}
	<-c.done
	logger.Info("ztunnel disconnected", "reason", c.cause())
}

// awaitListing waits until the agent has listed the runtime's pods, at
// most until the hold Resume set ends, or the connection or server goes.
// It reports whether the listing was done and how long it waited.
func (s *Server) awaitListing(ctx context.Context, c *conn) (bool, time.Duration) {
	s.mu.Lock()
	listed, until := s.listed, s.holdUntil
	s.mu.Unlock()
	if listed == nil {
		return true, 0
	}
	select {
	case <-listed:
		return true, 0
	default:
	}
	start := time.Now()
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	c.log.Info("Holding the snapshot until the runtime's pods are listed", "atMost", time.Until(until).Round(time.Millisecond))
	select {
	case <-listed:
		return true, time.Since(start)
	case <-timer.C:
	case <-c.done:
	case <-ctx.Done():
	}
	return false, time.Since(start)
}

// keepUnnamed names, with Keep, every pod ztunnel should go on proxying
// that the replay did not: a previous agent's not yet adopted, and those
// registered since the replay began whose Add has not gone out on this
// connection yet. A Keep for a pod deleted meanwhile, or whose Add went
// out meanwhile, is not sent. It returns how many it sent.
func (s *Server) keepUnnamed(ctx context.Context, c *conn, replayed map[*workload]bool) (int, error) {
	s.mu.Lock()
	var uids []string
	for uid := range s.previous {
		uids = append(uids, uid)
	}
	for uid, w := range s.workloads {
		if !replayed[w] {
			uids = append(uids, uid)
		}
	}
	s.mu.Unlock()
	sort.Strings(uids)
	kept := 0
	for _, uid := range uids {
		err := c.request(ctx, outgoing{req: keepRequest(uid), kind: "keep", uid: uid, wanted: func() bool { return s.unnamedOn(c, uid) }})
		var nack *NackError
		switch {
		case err == nil:
			kept++
		case errors.Is(err, errRetired):
		case errors.As(err, &nack):
			c.log.Info("ztunnel refused a Keep", "podUID", uid, "reason", nack.Reason)
		default:
			return kept, err
		}
	}
	return kept, nil
}

// unnamedOn reports whether ztunnel should go on proxying the pod (it is
// registered, or a previous agent's not yet added or deleted) and c has
// not carried its Add.
func (s *Server) unnamedOn(c *conn, uid string) bool {
	s.mu.Lock()
	_, prev := s.previous[uid]
	w := s.workloads[uid]
	s.mu.Unlock()
	return prev || w != nil && !c.sentAdd(w)
}

// unregistered reports whether no workload of the pod is registered: a
// Del for it is still wanted.
func (s *Server) unregistered(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workloads[uid] == nil
}

// drop removes a closed connection from the list.
func (s *Server) drop(c *conn) {
	c.close(errConnClosed)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range s.conns {
		if o == c {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			break
		}
	}
}

func workloadInfo(w *enroll.Workload) *zdspb.WorkloadInfo {
	return &zdspb.WorkloadInfo{Name: w.Name, Namespace: w.Namespace, ServiceAccount: w.ServiceAccount}
}

// AddWorkload registers the workload and sends Add, with a dup of its netns
// fd, to the newest connection.
//
// A starting pod's (HandoverNow) returns when ztunnel acks; it fails with
// ErrNoProxy when no ztunnel is connected, and on any error the workload
// is not registered (and ztunnel, which may have it, gets a Del).
//
// A running pod's (HandoverDeferred) returns once the workload is
// registered: the Add goes to the newest connection in its turn, in the
// background, or with the next connection's snapshot. A refusal keeps the
// pod registered (its rules stay) and is retried with backoff until
// ztunnel takes it, as ztunnel retries it by itself (Refused counts them).
// So adopting a node's pods after a restart takes no ztunnel round trip
// per pod inside the runtime's Synchronize.
func (s *Server) AddWorkload(ctx context.Context, ew *enroll.Workload, h enroll.Handover) error {
	if ew.Netns == nil {
		return errors.New("zds add: workload has no netns")
	}
	fd := -1
	err := ew.Netns.WithFd(func(nsfd int) error {
		var err error
		fd, err = unix.FcntlInt(uintptr(nsfd), unix.F_DUPFD_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return fmt.Errorf("zds add: dup netns fd: %w", err)
	}
	w := &workload{uid: ew.UID, info: workloadInfo(ew), fd: fd}
	c, err := s.register(w, h == enroll.HandoverDeferred)
	if err != nil {
		return fmt.Errorf("zds add: %w", err)
	}
	if c == nil {
		return nil // deferred: the next connection's snapshot carries it
	}
	if h == enroll.HandoverDeferred {
		s.handOver(c, w)
		return nil
	}
	if err := c.send(ctx, w); err != nil {
		s.unregister(w)
		return fmt.Errorf("zds add: %w", err)
	}
	return nil
}

// register puts w in the registry and picks the newest connection. With
// no connection it fails, or registers w for the next snapshot if deferOK.
func (s *Server) register(w *workload, deferOK bool) (*conn, error) {
	s.mu.Lock()
	var c *conn
	if n := len(s.conns); n > 0 {
		c = s.conns[n-1]
	}
	if c == nil && !deferOK {
		s.mu.Unlock()
		w.retire()
		return nil, ErrNoProxy
	}
	old := s.workloads[w.uid]
	s.workloads[w.uid] = w
	delete(s.previous, w.uid)
	s.mu.Unlock()
	if old != nil {
		old.retire()
	}
	return c, nil
}

// unregister undoes register after a failed Add. Every connection gets a
// Del, in the background: one that joined meanwhile may have received w
// in its replay, and the one that failed may still get to run it (an Add
// its caller gave up on) or retry it (ztunnel retries a refused Add by
// itself until told to forget it).
func (s *Server) unregister(w *workload) {
	s.mu.Lock()
	if s.workloads[w.uid] == w {
		delete(s.workloads, w.uid)
	}
	conns := append([]*conn(nil), s.conns...)
	s.mu.Unlock()
	w.retire()
	for _, c := range conns {
		s.delInBackground(c, w.uid)
	}
}

// handOver sends a running pod's Add on c in its turn, in the background,
// and retries a refusal with backoff on the newest connection until
// ztunnel takes it. It stops when the workload is deleted or replaced,
// when the connection fails (the next connection's snapshot carries the
// workload), or with the server.
func (s *Server) handOver(c *conn, w *workload) {
	s.mu.Lock()
	w.delivering = true
	s.mu.Unlock()
	s.background(func() { s.deliver(c, w, c.send(s.life, w)) })
}

// followUp has a refusal (err) of w's Add on c, outside a handover,
// retried: by a new deliver loop, or by the one already running for w.
func (s *Server) followUp(c *conn, w *workload, err error) {
	var nack *NackError
	s.mu.Lock()
	running := w.delivering
	if running {
		w.refusedAgain = true
	} else {
		w.delivering = true
	}
	s.mu.Unlock()
	if !running {
		s.background(func() { s.deliver(c, w, err) })
	} else if errors.As(err, &nack) {
		s.refusal(c, w, nack.Reason)
	}
}

// refusal records that ztunnel refused w's Add on c for reason, and says
// so the first time.
func (s *Server) refusal(c *conn, w *workload, reason string) {
	if s.setRefused(w, reason, true) {
		c.log.Info("ztunnel refused a running pod: its redirection stays, and the Add is retried until ztunnel takes it",
			"podUID", w.uid, "reason", reason)
		if s.cfg.Refused != nil {
			s.cfg.Refused(enroll.PodRef{UID: w.uid, Name: w.info.GetName(), Namespace: w.info.GetNamespace()}, reason)
		}
	}
}

// ended reports whether w's deliver loop may end: no connection refused
// the Add since the loop last sent it (on the newest connection then) (a workload retired, or a server
// closing, ends it in any case). Else the loop sends it again.
func (s *Server) ended(w *workload, anyway bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.refusedAgain && !anyway {
		w.refusedAgain = false
		return false
	}
	w.delivering, w.refusedAgain = false, false
	return true
}

// deliver follows up on an Add of w sent on c, which ended with err: a
// refusal is retried with backoff on the newest connection until ztunnel
// takes it, the workload is deleted or replaced, or the server closes.
// It runs in the background, one loop per workload at a time (followUp).
func (s *Server) deliver(c *conn, w *workload, err error) {
	backoff := retryMin
	for {
		var nack *NackError
		if errors.As(err, &nack) {
			s.refusal(c, w, nack.Reason)
		} else {
			if err != nil && !errors.Is(err, errRetired) && !errors.Is(err, errConnClosed) && s.life.Err() == nil {
				c.log.Info("Handing a running pod to ztunnel failed; the next connection's snapshot carries it", "podUID", w.uid, "err", err)
			}
			if s.ended(w, errors.Is(err, errRetired) || s.life.Err() != nil) {
				if err == nil {
					s.setRefused(w, "", false)
				}
				return
			}
			// Refused on a newer connection meanwhile: sent again there.
		}
		select {
		case <-s.life.Done():
			s.ended(w, true)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
		if c = s.newest(); c == nil {
			s.ended(w, true)
			return
		}
		// Sent on the newest connection: refusals on older ones no
		// longer count.
		s.mu.Lock()
		w.refusedAgain = false
		s.mu.Unlock()
		err = c.send(s.life, w)
	}
}

// background runs fn on a goroutine Close waits for, unless the server is
// closing (its connections are going).
func (s *Server) background(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.bg.Go(fn)
	}
}

// setRefused records whether w's Add stands refused (for reason); it
// reports whether that is new.
func (s *Server) setRefused(w *workload, reason string, refused bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.refused[w.uid].w == w
	switch {
	case refused:
		s.refused[w.uid] = refusal{w: w, reason: reason}
	case was:
		delete(s.refused, w.uid)
	}
	return refused && !was
}

// Refused returns how many running pods' Adds ztunnel refused and meshlet
// retries.
func (s *Server) Refused() int {
	return len(s.RefusedPods())
}

// RefusedPods returns the running pods whose Adds ztunnel refused and
// meshlet retries: pod UID → ztunnel's reason.
func (s *Server) RefusedPods() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.refused))
	for uid, r := range s.refused {
		if s.workloads[uid] == r.w {
			out[uid] = r.reason
		}
	}
	return out
}

// newest is the newest connection, or nil.
func (s *Server) newest() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.conns); n > 0 {
		return s.conns[n-1]
	}
	return nil
}

// delInBackground sends Del for uid on c on a context of its own (the
// caller's deadline may be what it could not wait for). It is not sent if
// a workload of the pod was registered meanwhile.
func (s *Server) delInBackground(c *conn, uid string) {
	s.background(func() {
		err := c.request(s.life, s.del(uid))
		if err != nil && !errors.Is(err, errConnClosed) && !errors.Is(err, errRetired) {
			c.log.Info("ztunnel Del failed", "podUID", uid, "err", err)
		}
	})
}

// del is a Del for uid, sent only while no workload of the pod is
// registered: one registered meanwhile (a new sandbox) must not be
// deleted by a Del ordered after its Add.
func (s *Server) del(uid string) outgoing {
	return outgoing{req: &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Del{Del: &zdspb.DelWorkload{Uid: uid}}},
		kind: "del", uid: uid, wanted: func() bool { return s.unregistered(uid) }}
}

func keepRequest(uid string) *zdspb.WorkloadRequest {
	return &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Keep{Keep: &zdspb.KeepWorkload{Uid: uid}}}
}

// ForgetInherited ends a previous agent's handover of the pod (Resume): it
// is no longer named with Keep, and, unless this agent has registered a
// workload of the pod since, every connection gets a Del.
func (s *Server) ForgetInherited(ctx context.Context, uid string) error {
	s.mu.Lock()
	delete(s.previous, uid)
	registered := s.workloads[uid] != nil
	conns := append([]*conn(nil), s.conns...)
	s.mu.Unlock()
	if registered {
		return nil
	}
	return s.delOn(ctx, conns, uid)
}

// DelWorkload drops the workload from the registry and sends Del to every
// connection. With no connection it only drops it: a ztunnel that connects
// later is not replayed the workload. A connection that is not free for
// the Del within ctx's deadline (a request ahead of it awaits its ack)
// gets it in the background: the caller (a runtime hook) does not wait
// longer than its deadline, and ztunnel still drops the pod.
func (s *Server) DelWorkload(ctx context.Context, uid string) error {
	s.mu.Lock()
	w := s.workloads[uid]
	delete(s.workloads, uid)
	delete(s.previous, uid)
	delete(s.refused, uid)
	conns := append([]*conn(nil), s.conns...)
	s.mu.Unlock()
	if w != nil {
		// Retire before sending: a replay that has not sent w yet skips it,
		// so no connection sees an Add after its Del.
		w.retire()
	}
	return s.delOn(ctx, conns, uid)
}

// delOn sends Del for uid on conns; a connection not free for it within
// ctx's deadline gets it in the background, in its turn.
func (s *Server) delOn(ctx context.Context, conns []*conn, uid string) error {
	var errs []error
	for _, c := range conns {
		err := c.request(ctx, s.del(uid))
		switch {
		case err == nil, errors.Is(err, errConnClosed), errors.Is(err, errRetired):
		case errors.Is(err, errNoTurn):
			s.delInBackground(c, uid)
		default:
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zds del: %w", err)
	}
	return nil
}
