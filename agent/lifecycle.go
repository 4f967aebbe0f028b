package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// shutdownOrder is the order in which the daemon's components stop,
// whatever the order they started in. First what only runs while taking
// the node over from istio-cni (the look for its plugin, the standby
// hook), then the node's taint or condition says its mesh is not ready
// (the scheduler stops placing mesh pods here), then new pods stop coming
// (the pod source: the NRI plugin, or CNI mode's server), then the DRA
// kubelet
// plugin (its device tainted first; before the node lock goes, so a
// successor never publishes the node's slice alongside it), then the API
// watchers, then the checkpoint writer (a last write), then the container
// gate (mesh containers are refused until the next meshlet answers), then
// the ZDS server, then the HTTP endpoints (before the node lock: a
// successor binds the same ports), then the node lock, and last the
// health socket (served from start-up: a standby is probed too).
//
// Enrolled pods keep their rules: an agent restart or upgrade must not
// unmesh running pods (the next agent re-adopts them, and ztunnel keeps
// proxying meanwhile). Only when meshlet's DaemonSet is deleted does a
// stopping meshlet also take its state off the node, at the uninstall
// steps (see uninstalling).
var shutdownOrder = []string{
	"istio-cni's plugin",
	"standby hook",
	"node readiness",
	"pod source",
	"retries",
	"uninstall: pods and CNI chain",
	"DRA kubelet plugin",
	"uninstall: ResourceSlices",
	"uninstall: node readiness",
	"API watchers",
	"checkpoint",
	"container gate",
	"ztunnel server",
	"uninstall: node state",
	"HTTP endpoints",
	"redirect",
	"node lock",
	"health socket",
	"prepared claims",
	"events",
}

// lifecycle runs the daemon's components and stops them in
// shutdownOrder. A component that fails, or returns while it should run,
// cancels the root context with its name and error as the cause.
//
// A name that is not in shutdownOrder, or started twice, panics: a
// programming error, which every test that runs the daemon finds.
type lifecycle struct {
	root context.Context
	fail context.CancelCauseFunc
	// order is shutdownOrder; tests give their own.
	order []string

	mu      sync.Mutex
	parts   map[string]*part
	stopped bool
}

// part is what stops at one name's turn: the component started under
// it, then the closers registered for it, the last registered first.
type part struct {
	run     func() // cancels the component and waits for it; nil: none
	closers []func()
}

// newLifecycle returns a lifecycle whose root ends with ctx or the first
// failure.
func newLifecycle(ctx context.Context, order []string) *lifecycle {
	root, fail := context.WithCancelCause(ctx)
	return &lifecycle{root: root, fail: fail, order: order, parts: map[string]*part{}}
}

// start runs run in the background, with a lifetime of its own that ends
// at name's turn to stop (not with the root: the order is kept). Once the
// lifecycle has stopped, run does not start.
func (l *lifecycle) start(name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(l.root))
	done := make(chan struct{})
	if !l.register(name, func(p *part) {
		if p.run != nil {
			panic(fmt.Sprintf("component %q started twice", name))
		}
		p.run = func() { cancel(); <-done }
	}) {
		cancel()
		return
	}
	go func() {
		defer close(done)
		if err := run(ctx); err != nil {
			l.fail(fmt.Errorf("%s: %w", name, err))
		} else if ctx.Err() == nil {
			l.fail(fmt.Errorf("%s stopped unexpectedly", name))
		}
	}()
}

// onStop has stop called at name's turn, after the component started
// under name, if any, has returned.
func (l *lifecycle) onStop(name string, stop func()) {
	if !l.register(name, func(p *part) { p.closers = append(p.closers, stop) }) {
		stop()
	}
}

// register adds to name's part; false once the lifecycle has stopped (the
// caller stops what it added at once: the others are gone).
func (l *lifecycle) register(name string, add func(*part)) bool {
	if !slices.Contains(l.order, name) {
		panic(fmt.Sprintf("component %q is not in the shutdown order", name))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	p := l.parts[name]
	if p == nil {
		p = &part{}
		l.parts[name] = p
	}
	add(p)
	return true
}

// stop stops every part, in order; only the first call does.
func (l *lifecycle) stop() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	l.mu.Unlock()
	for _, name := range l.order {
		p := l.parts[name]
		if p == nil {
			continue
		}
		if p.run != nil {
			p.run()
		}
		for _, c := range slices.Backward(p.closers) {
			c()
		}
	}
	l.fail(nil)
}
