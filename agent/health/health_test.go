package health

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadiness: a standby (no node lock) is ready once its DRA plugin
// serves and it could take the node over, so a surge update can stop the
// previous meshlet; the lock holder
// is ready only once it serves the node; a DRA plugin that stopped makes
// either unready.
func TestReadiness(t *testing.T) {
	registration := errors.New("DRA kubelet plugin mesh.meshlet.dev not serving")
	servingErr := errors.New("runtime not connected over NRI")
	var regErr, serveErr error
	r := &Readiness{plugin: func() error { return regErr }}
	serving := func() error { return serveErr }

	steps := []struct {
		name       string
		setup      func()
		wantDetail string
		wantErr    error
	}{
		{"standby, plugin not serving", func() { regErr = registration }, "", registration},
		{"standby, takeover not checked yet", func() { regErr = nil }, "", errors.New("standby: checking whether this meshlet could take the node over")},
		{"standby, cannot take over", func() {
			r.takeover.Store(&takeoverResult{err: errors.New("the runtime's NRI socket /x does not answer"), at: time.Now()})
		}, "", errors.New("standby: cannot take the node over: the runtime's NRI socket /x does not answer")},
		{"standby, could take over, answer stale", func() { r.takeover.Store(&takeoverResult{at: time.Now().Add(-takeoverStale - time.Second)}) },
			"", errors.New("standby: the check whether this meshlet could take the node over last answered")},
		{"standby, could take over", func() { r.takeover.Store(&takeoverResult{at: time.Now()}) }, StandbyDetail, nil},
		{"lock held, not serving yet", func() { r.SetLockHeld() }, "", errors.New("starting")},
		{"serving, runtime gone", func() { r.SetServing(serving); serveErr = servingErr }, "", servingErr},
		{"serving", func() { serveErr = nil }, "serving", nil},
		{"serving, plugin stopped", func() { regErr = registration }, "", registration},
	}
	for _, s := range steps {
		s.setup()
		detail, err := r.Check()
		if detail != s.wantDetail || (err == nil) != (s.wantErr == nil) || (err != nil && !strings.Contains(err.Error(), s.wantErr.Error())) {
			t.Errorf("%s: check() = %q, %v; want %q, %v", s.name, detail, err, s.wantDetail, s.wantErr)
		}
	}
}

// TestProbe: meshlet probe over the health socket answers like /readyz
// and /healthz, and refuses what it cannot ask.
func TestProbe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "health.sock")
	var notReady error = errors.New("ZDS socket not serving")
	s, err := ServeSocket(path, Handler(func() (string, error) { return "serving", notReady }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	ctx := context.Background()

	var out bytes.Buffer
	if err := Probe(ctx, path, "healthz", &out); err != nil || out.String() != "ok\n" {
		t.Errorf("probe healthz = %q, %v; want ok", out.String(), err)
	}
	err = Probe(ctx, path, "readyz", &out)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "ZDS socket not serving") {
		t.Errorf("probe readyz while not ready = %v; want 503 with the reason", err)
	}
	notReady = nil
	out.Reset()
	if err := Probe(ctx, path, "readyz", &out); err != nil || out.String() != "ok: serving\n" {
		t.Errorf("probe readyz when ready = %q, %v; want ok: serving", out.String(), err)
	}

	for _, c := range []struct {
		socket   string
		endpoint string
		want     string
	}{
		{path, "metrics", `endpoint "metrics": want one of readyz, healthz`},
		{"", "readyz", "--health-socket (MESHLET_HEALTH_SOCKET) is not set"},
		{filepath.Join(t.TempDir(), "none.sock"), "readyz", "ask meshlet at"},
	} {
		if err := Probe(ctx, c.socket, c.endpoint, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("probe %s on %q = %v; want an error with %q", c.endpoint, c.socket, err, c.want)
		}
	}

	// A second meshlet given the same path is refused: it must not unlink
	// the first one's socket.
	if _, err := ServeSocket(path, Handler(nil)); err == nil || !strings.Contains(err.Error(), "another process serves it") {
		t.Errorf("a second server on %s: %v; want a refusal", path, err)
	}
	if err := Probe(ctx, path, "healthz", &out); err != nil {
		t.Errorf("the first server's socket is gone after the refusal: %v", err)
	}
}

// TestReadinessLatePlugin: a DRA plugin that starts only once the node
// lock is held (no --pod-uid) does not hold a standby back, and counts
// once this meshlet serves.
func TestReadinessLatePlugin(t *testing.T) {
	notServing := errors.New("DRA kubelet plugin mesh.meshlet.dev not serving")
	r := &Readiness{}
	r.SetPlugin(func() error { return notServing }, true)
	r.takeover.Store(&takeoverResult{at: time.Now()})
	if detail, err := r.Check(); err != nil || detail != StandbyDetail {
		t.Errorf("standby with a late plugin: %q, %v; want ok (standby)", detail, err)
	}
	r.SetLockHeld()
	serving := func() error { return nil }
	r.SetServing(serving)
	if _, err := r.Check(); !errors.Is(err, notServing) {
		t.Errorf("serving, plugin not started: %v; want %v", err, notServing)
	}
}
