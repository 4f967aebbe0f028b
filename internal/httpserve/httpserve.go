// Package httpserve serves meshlet's local HTTP endpoints (health,
// metrics, debug): listen at once, so that a bad address fails start-up,
// serve in the background, stop with a bound.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// Server serves one handler on one listener in the background.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Listen listens on the TCP address addr now and serves h; name says what
// the listener is for in its error.
func Listen(name, addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener on %s: %w", name, addr, err)
	}
	return Serve(ln, h), nil
}

// Serve serves h on ln in the background.
func Serve(ln net.Listener, h http.Handler) *Server {
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln: ln, done: make(chan error, 1)}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stop shuts the server down, waiting at most 5s for requests in flight.
func (s *Server) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, <-s.done)
}

// StopLogged stops s, logging a failure (a shutdown goes on).
func (s *Server) StopLogged(logger klog.Logger) {
	if err := s.Stop(); err != nil {
		logger.Error(err, "Stopping HTTP server", "address", s.Addr())
	}
}

// Answer is what a local endpoint replied: its status line, and its
// body up to the limit asked for.
type Answer struct {
	Status string
	OK     bool // 200
	Body   []byte
}

// Get asks path (e.g. /readyz) of the meshlet serving the Unix socket at
// socket, within timeout, reading at most limit bytes of the answer. A
// failure to connect is returned as it is: the caller says what it asked.
func Get(ctx context.Context, socket, path string, timeout time.Duration, limit int64) (Answer, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://meshlet"+path, nil)
	if err != nil {
		return Answer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return Answer{}, fmt.Errorf("read %s: %w", path, err)
	}
	return Answer{Status: resp.Status, OK: resp.StatusCode == http.StatusOK, Body: body}, nil
}
