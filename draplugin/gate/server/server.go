package server

import (
	"context"
	"fmt"
	"net"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/gate"
	"github.com/meshlet/meshlet/internal/unixsock"
)

// Enrollments is the core's view the server answers from.
type Enrollments interface {
	Record(uid string) (enroll.Record, bool)
	RecordInNetns(inode uint64) (enroll.Record, bool)
	Status(uid string) (enroll.PodStatus, bool)
}

var _ Enrollments = (*enroll.Core)(nil)

// Decision is how a request ended, for metrics.
type Decision string

const (
	Allowed Decision = "allowed"
	Refused Decision = "refused"
	// Invalid: the request could not be read; the hook refuses the
	// container when it gets no answer.
	Invalid Decision = "invalid"
)

// Config configures the server.
type Config struct {
	// SocketPath is where meshlet-gate connects (the CDI spec's --socket).
	SocketPath string
	// Timeout bounds one request, reading it included.
	Timeout time.Duration
	// MaxConcurrent bounds the requests served at once; more wait.
	MaxConcurrent int
	// Observe, if set, sees every request's decision, before the answer
	// is sent.
	Observe func(Decision)
}

// Server answers meshlet-gate.
type Server struct {
	cfg  Config
	pods Enrollments
	ln   *net.UnixListener
}

// Listen creates the socket, mode 0600: only root may connect (the
// runtime runs hooks as root), and each peer's credentials are checked.
func Listen(cfg Config, pods Enrollments) (*Server, error) {
	if cfg.SocketPath == "" {
		cfg.SocketPath = gate.DefaultSocket
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = gate.DefaultTimeout
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 64
	}
	ln, err := unixsock.ListenPacket(cfg.SocketPath, 0o700, 0o600)
	if err != nil {
		return nil, fmt.Errorf("gate server: %w", err)
	}
	return &Server{cfg: cfg, pods: pods, ln: ln}, nil
}

// Addr is the socket path.
func (s *Server) Addr() string { return s.cfg.SocketPath }

// Close stops listening and removes the socket.
func (s *Server) Close() error { return s.ln.Close() }

// Serve answers requests until ctx ends, then waits for those in flight.
func (s *Server) Serve(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("gate")
	err := unixsock.ServeRoot(ctx, s.ln, s.cfg.MaxConcurrent,
		func(err error) { logger.Info("Refused a gate connection", "reason", err) },
		func(conn *net.UnixConn) { s.serve(logger, conn) })
	if err != nil {
		return fmt.Errorf("gate server: %w", err)
	}
	return nil
}

// serve answers one connection's request.
func (s *Server) serve(logger klog.Logger, conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(s.cfg.Timeout))
	msg, err := gate.ReadMessage(conn)
	var req *gate.Request
	if err == nil {
		req, err = gate.DecodeRequest(msg)
	}
	if err != nil {
		logger.Info("Refused a gate request", "err", err)
		s.observe(Invalid)
		_ = gate.WriteResponse(conn, &gate.Response{Reason: err.Error()})
		return
	}
	resp := s.Decide(req)
	decision := Allowed
	if !resp.Allow {
		decision = Refused
		logger.Info("Container refused: its pod is not in the mesh", "container", req.ContainerID, "podUID", req.PodUID,
			"sandbox", req.SandboxID, "netnsInode", req.NetnsInode, "reason", resp.Reason)
	} else {
		logger.V(4).Info("Container allowed", "container", req.ContainerID, "podUID", req.PodUID, "netnsInode", req.NetnsInode)
	}
	s.observe(decision)
	if err := gate.WriteResponse(conn, resp); err != nil {
		logger.Info("Answering a gate request", "container", req.ContainerID, "err", err)
	}
}

func (s *Server) observe(d Decision) {
	if s.cfg.Observe != nil {
		s.cfg.Observe(d)
	}
}

// Decide answers a request: allowed only if a pod this meshlet enrolled
// holds the container's network namespace and, where the runtime named
// the pod and its sandbox, it is that pod in that sandbox. The inode is
// enough to tell the namespace: the core holds an enrolled pod's namespace
// open, so no other can have its inode meanwhile. A previous meshlet's
// record (its checkpoint) never allows a container: the namespace it names
// may have been freed and its inode given to another while no meshlet ran
// (or the node rebooted); the pod is allowed once this meshlet has
// confirmed it with the runtime and adopted it, which the runtime's retry
// of the container then finds.
func (s *Server) Decide(req *gate.Request) *gate.Response {
	if req.PodUID == "" {
		if _, ok := s.pods.RecordInNetns(req.NetnsInode); ok {
			return &gate.Response{Allow: true}
		}
		return &gate.Response{Reason: fmt.Sprintf("no pod in the mesh has the container's network namespace (inode %d)", req.NetnsInode)}
	}
	rec, ok := s.pods.Record(req.PodUID)
	if !ok {
		st, known := s.pods.Status(req.PodUID)
		if !known {
			return &gate.Response{Reason: fmt.Sprintf("meshlet has not enrolled pod %s: no runtime hook or CNI call reached it for this pod, "+
				"or meshlet restarted and has not yet found it running", req.PodUID)}
		}
		reason := fmt.Sprintf("pod %s/%s is not in the mesh: %s", st.Namespace, st.Name, st.State)
		if st.Reason != "" {
			reason += " (" + st.Reason + ")"
		}
		return &gate.Response{Reason: reason}
	}
	if !enroll.SameSandbox(rec.SandboxID, req.SandboxID) {
		return &gate.Response{Reason: fmt.Sprintf("the container's sandbox %s is not the one pod %s/%s is enrolled in (%s)",
			req.SandboxID, rec.Namespace, rec.Name, rec.SandboxID)}
	}
	if rec.NetnsInode != req.NetnsInode {
		return &gate.Response{Reason: fmt.Sprintf("the container's network namespace (inode %d) is not the one pod %s/%s is enrolled in (inode %d)",
			req.NetnsInode, rec.Namespace, rec.Name, rec.NetnsInode)}
	}
	return &gate.Response{Allow: true}
}
