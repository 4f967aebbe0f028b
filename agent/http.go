package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// healthHandler serves /healthz (the process is alive) and /readyz: ready
// says, with a detail, whether this meshlet does its part on the node (see
// readiness), or why not.
func healthHandler(ready func() (string, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		detail, err := ready()
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: %s\n", detail)
	})
	return mux
}

func metricsHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// httpServer listens now (so a bad address fails start-up) and serves in
// the background; stop shuts it down.
type httpServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

func listenHTTP(name, addr string, h http.Handler) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener on %s: %w", name, addr, err)
	}
	return serveHTTP(ln, h), nil
}

// serveHTTP serves h on ln in the background.
func serveHTTP(ln net.Listener, h http.Handler) *httpServer {
	s := &httpServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln: ln, done: make(chan error, 1)}
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
func (s *httpServer) Addr() string { return s.ln.Addr().String() }

func (s *httpServer) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, <-s.done)
}

// unixHTTPClient is an HTTP client whose every request goes to the Unix
// socket at path (meshlet's local endpoints: the debug and health sockets).
func unixHTTPClient(path string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
}

// stopHTTP stops s, logging a failure (shutdown goes on).
func stopHTTP(logger klog.Logger, s *httpServer) {
	if err := s.stop(); err != nil {
		logger.Error(err, "Stopping HTTP server", "address", s.Addr())
	}
}
