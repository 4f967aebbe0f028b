// Package health answers /healthz and /readyz: whether this meshlet does
// its part on the node, as a standby during a surge update or as the
// meshlet serving it, and meshlet probe, the DaemonSet's exec probes.
package health

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

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/internal/httpserve"
	"github.com/meshlet/meshlet/internal/unixsock"
)

// Readiness is what /readyz reports: whether this meshlet does its part
// on the node. One meshlet serves a node (it holds the node lock); during
// a surge update a second one waits on the lock as a standby, ready once
// its DRA kubelet plugin serves and it could take the node over, so that
// the DaemonSet controller may stop the first.
type Readiness struct {
	// plugin is whether the DRA kubelet plugin serves (nil without DRA):
	// both the standby and the serving meshlet answer the kubelet's DRA
	// calls.
	plugin func() error
	// takeover is a standby's last answer to whether it could take the
	// node over (nil: not asked yet).
	takeover atomic.Pointer[takeoverResult]
	// lockHeld is set once this meshlet holds the node lock.
	lockHeld atomic.Bool
	// serving, once set, says whether the node's meshlet can enroll pods.
	serving atomic.Pointer[func() error]
	// Warnings, if set, are what a serving meshlet's /readyz adds to its
	// answer: problems that do not stop it serving (a node settings
	// document it cannot use).
	Warnings func() []string
}

// SetLockHeld records that this meshlet holds the node lock: it serves
// the node, and no longer waits as a standby.
func (r *Readiness) SetLockHeld() { r.lockHeld.Store(true) }

// SetServing makes serving say, from now on, whether the meshlet holding
// the node lock can enroll pods (nil: it can).
func (r *Readiness) SetServing(serving func() error) { r.serving.Store(&serving) }

// SetPlugin makes the DRA kubelet plugin's serving part of readiness. A
// plugin that starts late (no --pod-uid: it starts once this meshlet holds
// the node lock, as two would share one socket) does not count while this
// meshlet waits: the serving meshlet answers the kubelet's DRA calls.
func (r *Readiness) SetPlugin(serving func() error, startsLate bool) {
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

// StandbyDetail is /readyz's answer from a ready standby.
const StandbyDetail = "standby: another meshlet serves this node; this one takes over when it exits"

// Check returns /readyz's detail when ready, else why not.
func (r *Readiness) Check() (detail string, err error) {
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
		return StandbyDetail, nil
	}
	serving := r.serving.Load()
	if serving == nil {
		return "", errors.New("starting: this meshlet holds the node lock and is setting up")
	}
	if err := (*serving)(); err != nil {
		return "", err
	}
	if r.Warnings != nil {
		if w := r.Warnings(); len(w) > 0 {
			return "serving; " + strings.Join(w, "; "), nil
		}
	}
	return "serving", nil
}

// ServeSocket serves h on the --health-socket path, refusing a path
// another live process serves (a standby must never unlink the serving
// meshlet's socket: each meshlet needs its own path).
func ServeSocket(path string, h http.Handler) (*httpserve.Server, error) {
	ln, err := unixsock.ListenStream(path, 0o700, 0o600)
	if errors.Is(err, unixsock.ErrInUse) {
		return nil, fmt.Errorf("--health-socket=%q: another process serves it; give each meshlet its own path (the chart uses a per-pod emptyDir)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("--health-socket: %w", err)
	}
	return httpserve.Serve(ln, h), nil
}

// ProbeEndpoints are the paths meshlet probe asks for.
var ProbeEndpoints = []string{"readyz", "healthz"}

// Probe asks the meshlet serving socket (--health-socket) for /readyz or
// /healthz (meshlet probe: a DaemonSet's exec probes). It returns nil on
// 200 and writes the answer to out; otherwise the error carries the answer.
func Probe(ctx context.Context, socket, endpoint string, out io.Writer) error {
	if !slices.Contains(ProbeEndpoints, endpoint) {
		return fmt.Errorf("endpoint %q: want one of %s", endpoint, strings.Join(ProbeEndpoints, ", "))
	}
	if socket == "" {
		return errors.New("--health-socket (MESHLET_HEALTH_SOCKET) is not set: nothing to probe")
	}
	// Below the chart's probe timeout, so the kubelet records why.
	answer, err := httpserve.Get(ctx, socket, "/"+endpoint, 3*time.Second, 4096)
	if err != nil {
		return fmt.Errorf("ask meshlet at %s: %w", socket, err)
	}
	if !answer.OK {
		return fmt.Errorf("/%s: %s: %s", endpoint, answer.Status, strings.TrimSpace(string(answer.Body)))
	}
	_, err = out.Write(answer.Body)
	return err
}

// What /readyz's answer starts with.
const (
	readyPrefix    = "ok: "
	notReadyPrefix = "not ready: "
)

// Readyz asks the meshlet serving socket (--health-socket) for /readyz:
// whether it is ready, and its detail or why not. err is for a socket
// that does not answer.
func Readyz(ctx context.Context, socket string) (ready bool, detail string, err error) {
	answer, err := httpserve.Get(ctx, socket, "/readyz", 3*time.Second, 4096)
	if err != nil {
		return false, "", fmt.Errorf("ask meshlet at %s: %w", socket, err)
	}
	body := strings.TrimSpace(string(answer.Body))
	if !answer.OK {
		return false, strings.TrimPrefix(body, notReadyPrefix), nil
	}
	return true, strings.TrimPrefix(body, readyPrefix), nil
}

// Handler serves /healthz (the process is alive) and /readyz: ready
// says, with a detail, whether this meshlet does its part on the node (see
// readiness), or why not.
func Handler(ready func() (string, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		detail, err := ready()
		if err != nil {
			http.Error(w, notReadyPrefix+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "%s%s\n", readyPrefix, detail)
	})
	return mux
}

// StandbyInterval is how often a meshlet waiting on the node lock checks
// again that it could take the node over.
const StandbyInterval = 5 * time.Second

// WatchTakeover checks every StandbyInterval, until ctx ends, whether this
// standby could take over (check, each bounded by StandbyInterval),
// publishing the answer for /readyz and logging each change.
func (r *Readiness) WatchTakeover(ctx context.Context, check func(context.Context) error) {
	logger := klog.FromContext(ctx)
	var last *takeoverResult
	for {
		cctx, cancel := context.WithTimeout(ctx, StandbyInterval)
		res := &takeoverResult{err: check(cctx), at: time.Now()}
		cancel()
		if ctx.Err() != nil {
			return // the lock was taken meanwhile: the answer is moot
		}
		r.takeover.Store(res)
		switch {
		case res.err == nil && (last == nil || last.err != nil):
			logger.Info("Standby: ready to take the node over when the meshlet serving it exits")
		case res.err != nil && (last == nil || last.err == nil || last.err.Error() != res.err.Error()):
			logger.Info("Standby: cannot take the node over; not ready", "reason", res.err)
		}
		last = res
		select {
		case <-ctx.Done():
			return
		case <-time.After(StandbyInterval):
		}
	}
}

// takeoverResult is one answer of the takeover check, and when it was given.
type takeoverResult struct {
	err error
	at  time.Time
}

// takeoverStale is how old a standby's last answer may be before /readyz
// stops trusting it (a check that hangs past its bound, or a stuck loop).
const takeoverStale = 3 * StandbyInterval
