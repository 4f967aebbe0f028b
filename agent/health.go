package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshlet/meshlet/internal/unixsock"
)

// readiness is what /readyz reports: whether this meshlet does its part
// on the node. One meshlet serves a node (it holds the node lock); during
// a surge update a second one waits on the lock as a standby, ready once
// its DRA kubelet plugin serves and it could take the node over, so that
// the DaemonSet controller may stop the first.
type readiness struct {
	// plugin is whether the DRA kubelet plugin serves (nil without DRA):
	// both the standby and the serving meshlet answer the kubelet's DRA
	// calls.
	plugin func() error
	// takeover is a standby's last answer to whether it could take the
	// node over (nil: not asked yet; see canTakeOver).
	takeover atomic.Pointer[takeoverResult]
	// lockHeld is set once this meshlet holds the node lock.
	lockHeld atomic.Bool
	// serving, once set, says whether the node's meshlet can enroll pods.
	serving atomic.Pointer[func() error]
	// warnings, if set, are what a serving meshlet's /readyz adds to its
	// answer: problems that do not stop it serving (a node settings
	// document it cannot use).
	warnings func() []string
}

// setPlugin makes the DRA kubelet plugin's serving part of readiness. A
// plugin that starts late (no --pod-uid: it starts once this meshlet holds
// the node lock, as two would share one socket) does not count while this
// meshlet waits: the serving meshlet answers the kubelet's DRA calls.
func (r *readiness) setPlugin(serving func() error, startsLate bool) {
	r.plugin = serving
	if startsLate {
		r.plugin = func() error {
			if !r.lockHeld.Load() {
				return nil
			}
			return serving()
		}
	}
}

// standbyDetail is /readyz's answer from a ready standby.
const standbyDetail = "standby: another meshlet serves this node; this one takes over when it exits"

// check returns /readyz's detail when ready, else why not.
func (r *readiness) check() (detail string, err error) {
	if r.plugin != nil {
		if err := r.plugin(); err != nil {
			return "", err
		}
	}
	if !r.lockHeld.Load() {
		switch t := r.takeover.Load(); {
		case t == nil:
			return "", errors.New("standby: checking whether this meshlet could take the node over")
		case t.err != nil:
			return "", fmt.Errorf("standby: cannot take the node over: %w", t.err)
		case time.Since(t.at) > takeoverStale:
			return "", fmt.Errorf("standby: the check whether this meshlet could take the node over last answered %v ago", time.Since(t.at).Round(time.Second))
		}
		return standbyDetail, nil
	}
	serving := r.serving.Load()
	if serving == nil {
		return "", errors.New("starting: this meshlet holds the node lock and is setting up")
	}
	if err := (*serving)(); err != nil {
		return "", err
	}
	if r.warnings != nil {
		if w := r.warnings(); len(w) > 0 {
			return "serving; " + strings.Join(w, "; "), nil
		}
	}
	return "serving", nil
}

// serveHealthSocket serves h on the --health-socket path, refusing a path
// another live process serves (a standby must never unlink the serving
// meshlet's socket: each meshlet needs its own path).
func serveHealthSocket(path string, h http.Handler) (*httpServer, error) {
	ln, err := unixsock.ListenStream(path, 0o700, 0o600)
	if errors.Is(err, unixsock.ErrInUse) {
		return nil, fmt.Errorf("--health-socket=%q: another process serves it; give each meshlet its own path (the chart uses a per-pod emptyDir)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("--health-socket: %w", err)
	}
	return serveHTTP(ln, h), nil
}

// ProbeEndpoints are the paths meshlet probe asks for.
var ProbeEndpoints = []string{"readyz", "healthz"}

// Probe asks the meshlet serving cfg.HealthSocket for /readyz or /healthz
// (meshlet probe: a DaemonSet's exec probes). It returns nil on 200 and
// writes the answer to out; otherwise the error carries the answer.
func Probe(ctx context.Context, cfg Config, endpoint string, out io.Writer) error {
	if !slices.Contains(ProbeEndpoints, endpoint) {
		return fmt.Errorf("endpoint %q: want one of %s", endpoint, strings.Join(ProbeEndpoints, ", "))
	}
	if cfg.HealthSocket == "" {
		return errors.New("--health-socket (MESHLET_HEALTH_SOCKET) is not set: nothing to probe")
	}
	// Below the chart's probe timeout, so the kubelet records why.
	client := unixHTTPClient(cfg.HealthSocket, 3*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://meshlet/"+endpoint, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("ask meshlet at %s: %w", cfg.HealthSocket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return fmt.Errorf("read /%s: %w", endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/%s: %s: %s", endpoint, resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = out.Write(body)
	return err
}
