package server

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/cnifallback/wire"
	"github.com/meshlet/meshlet/internal/unixsock"
)

// DefaultSocketPath is meshlet's --cni-socket default.
const DefaultSocketPath = "/var/run/meshlet/cni.sock"

// Core is the part of the enrollment core the server drives.
type Core interface {
	Enroll(ctx context.Context, pod enroll.Pod) (enroll.Result, error)
	Forget(ctx context.Context, uid, sandboxID string) error
}

var _ Core = (*enroll.Core)(nil)

// Config configures the server.
type Config struct {
	// SocketPath is where meshlet-cni connects (its conflist entry's
	// agentSocket).
	SocketPath string
	// MaxConcurrent bounds the requests served at once; more wait.
	MaxConcurrent int
	// Timeout bounds one request, reading it included. Keep it below the
	// plugin's agentTimeout, so the plugin gets the agent's answer.
	Timeout time.Duration
	// Observe, if set, sees every ADD that changed or failed an
	// enrollment, with its duration (the NRI hook reports the same).
	Observe func(pod enroll.PodRef, d time.Duration, err error)
}

// Server serves meshlet-cni.
type Server struct {
	cfg  Config
	core Core
	ln   *net.UnixListener
}

// Listen creates the socket, mode 0600: only root may connect, and the
// server also checks each peer's credentials.
func Listen(cfg Config, core Core) (*Server, error) {
	if cfg.SocketPath == "" {
		cfg.SocketPath = DefaultSocketPath
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 16
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 4 * time.Second
	}
	ln, err := unixsock.ListenPacket(cfg.SocketPath, 0o700, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cni server: %w", err)
	}
	return &Server{cfg: cfg, core: core, ln: ln}, nil
}

// Addr is the socket path.
func (s *Server) Addr() string { return s.cfg.SocketPath }

// Close stops listening and removes the socket.
func (s *Server) Close() error { return s.ln.Close() }

// Serve answers requests until ctx ends, then waits for those in flight.
func (s *Server) Serve(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("cni")
	err := unixsock.ServeRoot(ctx, s.ln, s.cfg.MaxConcurrent,
		func(err error) { logger.Info("Refused a CNI connection", "reason", err) },
		func(conn *net.UnixConn) { s.serve(ctx, logger, conn) })
	if err != nil {
		return fmt.Errorf("cni server: %w", err)
	}
	return nil
}

// serve answers one connection's request.
func (s *Server) serve(ctx context.Context, logger klog.Logger, conn net.Conn) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_ = conn.SetDeadline(time.Now().Add(s.cfg.Timeout))
	req, err := wire.ReadRequest(conn)
	if err != nil {
		logger.Info("Refused a CNI request", "err", err)
		_ = wire.WriteResponse(conn, &wire.Response{Outcome: wire.OutcomeFailed, Reason: "request", Message: err.Error()})
		return
	}
	resp := s.handle(ctx, req)
	if resp.Outcome == wire.OutcomeFailed {
		logger.Info("CNI request failed", "command", req.Command, "pod", klog.KRef(req.Pod.Namespace, req.Pod.Name), "podUID", req.Pod.UID, "reason", resp.Reason, "err", resp.Message)
	}
	if err := wire.WriteResponse(conn, resp); err != nil {
		logger.Info("Answering a CNI request", "pod", klog.KRef(req.Pod.Namespace, req.Pod.Name), "err", err)
	}
}

// handle turns a request into the core's call.
func (s *Server) handle(ctx context.Context, req *wire.Request) *wire.Response {
	switch req.Command {
	case wire.CommandDel:
		if req.Pod.UID == "" {
			return &wire.Response{Outcome: wire.OutcomeEnrolled, Reason: "unknown-pod"}
		}
		// The container ID is the sandbox's: the DEL of a sandbox the
		// kubelet replaced leaves the pod's new one as it is.
		if err := s.core.Forget(ctx, req.Pod.UID, req.ContainerID); err != nil {
			return &wire.Response{Outcome: wire.OutcomeFailed, Reason: "release", Message: err.Error()}
		}
		return &wire.Response{Outcome: wire.OutcomeEnrolled, Reason: "released"}
	default: // ADD, CHECK: Enroll is idempotent, so a CHECK is the same call
		// Sorted, as the runtime's pod list gives them (agent/cri):
		// a restarted meshlet adopts the pod only if its record matches.
		ips := slices.Clone(req.IPs)
		slices.SortFunc(ips, netip.Addr.Compare)
		pod := enroll.Pod{UID: req.Pod.UID, SandboxID: req.ContainerID, Name: req.Pod.Name, Namespace: req.Pod.Namespace, NetnsPath: req.Netns, IPs: ips}
		start := time.Now()
		res, err := s.core.Enroll(ctx, pod)
		if s.cfg.Observe != nil && (err != nil || res.Enrolled && res.Changed) {
			s.cfg.Observe(enroll.PodRef{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}, time.Since(start), err)
		}
		if err != nil {
			reason := string(enroll.FailedStep(err))
			if reason == "" {
				reason = "enroll"
			}
			return &wire.Response{Outcome: wire.OutcomeFailed, Reason: reason, Message: err.Error()}
		}
		if !res.Enrolled {
			return &wire.Response{Outcome: wire.OutcomeSkipped, Reason: res.Reason}
		}
		return &wire.Response{Outcome: wire.OutcomeEnrolled, Reason: res.Reason}
	}
}
