package zds

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
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
}

// Server is the ZDS server. It implements enroll.ProxyLink and keeps its own
// registry of workloads (with a dup of each netns fd) to replay to every new
// connection.
type Server struct {
	cfg Config
	ln  *net.UnixListener

	mu        sync.Mutex
	workloads map[string]*workload
	conns     []*conn // in connection order: the last one is the newest
	nextID    uint64
	closed    bool
	wg        sync.WaitGroup
}

var _ enroll.ProxyLink = (*Server)(nil)

// workload is one registry entry. fd is a dup the server owns; -1 once
// retired.
type workload struct {
	uid  string
	info *zdspb.WorkloadInfo

	mu      sync.RWMutex // write-locked to retire; read-locked around a send of fd
	fd      int
	retired bool
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
	return &Server{cfg: cfg, ln: ln, workloads: make(map[string]*workload)}, nil
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
	_ = s.ln.Close()
	for _, c := range conns {
		c.close(errors.New("server shutting down"))
	}
}

// Close stops the server (if Serve is not already stopped by its context)
// and releases every netns fd the registry holds.
func (s *Server) Close() error {
	s.shutdown()
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
	for _, w := range snapshot {
		err := c.send(ctx, w)
		var nack *NackError
		switch {
		case err == nil || errors.Is(err, errRetired):
		case errors.As(err, &nack):
			nacks++
			logger.Info("ztunnel refused a workload during replay", "podUID", w.uid, "reason", nack.Reason)
		default:
			logger.Info("Snapshot replay aborted", "podUID", w.uid, "err", err)
			c.close(err)
			<-c.done
			return
		}
	}
	if err := c.request(ctx, &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_SnapshotSent{SnapshotSent: &zdspb.SnapshotSent{}}}, "snapshot_sent", "", nil); err != nil {
		logger.Info("Snapshot replay aborted", "err", err)
		c.close(err)
	} else {
		logger.Info("Snapshot sent", "workloads", len(snapshot), "nacks", nacks, "duration", time.Since(start))
	}
	<-c.done
	logger.Info("ztunnel disconnected", "reason", c.cause())
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
// fd, to the newest connection; it returns when ztunnel acks. With no
// connection it fails with ErrNoProxy, or with HandoverDeferred keeps the
// workload registered for the next connection's snapshot. On any error the
// workload is not registered.
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
	if err := c.send(ctx, w); err != nil {
		var nack *NackError
		if h == enroll.HandoverDeferred && !errors.As(err, &nack) && !errors.Is(err, errRetired) {
			// The connection failed under the Add (closed, timed out, or
			// abandoned with the caller's deadline, which closes it): as
			// with no connection at all, the next connection's snapshot
			// carries it. Only ztunnel's refusal fails a running pod.
			return nil
		}
		s.unregister(ctx, w, c)
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
	s.mu.Unlock()
	if old != nil {
		old.retire()
	}
	return c, nil
}

// unregister undoes register after a failed Add. A connection that joined
// meanwhile may have received w in its replay: it gets a Del.
func (s *Server) unregister(ctx context.Context, w *workload, failed *conn) {
	s.mu.Lock()
	if s.workloads[w.uid] == w {
		delete(s.workloads, w.uid)
	}
	others := s.otherConns(failed)
	s.mu.Unlock()
	w.retire()
	if len(others) == 0 {
		return
	}
	// The caller's deadline may be what failed the Add: clean up on a
	// context of our own, or an expired one would close these connections.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AckTimeout)
	defer cancel()
	for _, c := range others {
		_ = c.request(cctx, delRequest(w.uid), "del", w.uid, nil)
	}
}

func (s *Server) otherConns(except *conn) []*conn {
	var out []*conn
	for _, c := range s.conns {
		if c != except {
			out = append(out, c)
		}
	}
	return out
}

func delRequest(uid string) *zdspb.WorkloadRequest {
	return &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Del{Del: &zdspb.DelWorkload{Uid: uid}}}
}

// DelWorkload drops the workload from the registry and sends Del to every
// connection. With no connection it only drops it: a ztunnel that connects
// later is not replayed the workload.
func (s *Server) DelWorkload(ctx context.Context, uid string) error {
	s.mu.Lock()
	w := s.workloads[uid]
	delete(s.workloads, uid)
	conns := append([]*conn(nil), s.conns...)
	s.mu.Unlock()
	if w != nil {
		// Retire before sending: a replay that has not sent w yet skips it,
		// so no connection sees an Add after its Del.
		w.retire()
	}
	var errs []error
	for _, c := range conns {
		if err := c.request(ctx, delRequest(uid), "del", uid, nil); err != nil && !errors.Is(err, errConnClosed) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zds del: %w", err)
	}
	return nil
}
