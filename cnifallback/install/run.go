package install

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

const (
	// debounce lets a burst of events (a CNI installer writing several
	// files, or one file in several writes) settle into one pass.
	debounce = 20 * time.Millisecond
	// settleRetry is the next try after errSettling or errSourceChanged:
	// another writer is mid-write.
	settleRetry = 50 * time.Millisecond
	// watchRetry: how often Run tries to watch a directory that is missing
	// (a CNI config directory the primary CNI has not created yet). It
	// bounds how late Run notices the directory.
	watchRetry = time.Second
	// pollInterval replaces events when no watcher can be had (the
	// inotify instance limit is a per-user sysctl that busy nodes reach).
	pollInterval = 500 * time.Millisecond
	// errRetry is the first retry after a failed pass; it doubles up to
	// the resync interval.
	errRetry = time.Second
)

// guard is the loop guard's tuning: more than max writes within window
// means another writer keeps undoing ours; the next pass is then delayed,
// from minDelay doubling to maxDelay, until a window passes with none.
type guard struct {
	window             time.Duration
	max                int
	minDelay, maxDelay time.Duration
}

var defaultGuard = guard{window: 10 * time.Second, max: 10, minDelay: 250 * time.Millisecond, maxDelay: 5 * time.Second}

// Run installs, then keeps meshlet installed until ctx ends (it returns
// nil then): it watches ConfDir (any config file created, written,
// removed or renamed) and BinDir (meshlet-cni itself) and re-asserts
// after a short debounce, and re-checks every ResyncInterval in case
// events were lost. A missing ConfDir, BinDir or primary config is not an
// error: Run logs it, Installed stays false, and it installs as soon as
// they appear. Without any file watcher (inotify limits) it polls.
func (in *Installer) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("confDir", in.cfg.ConfDir, "binDir", in.cfg.BinDir)
	ctx = klog.NewContext(ctx, log)
	r := &runner{in: in, log: log, watched: map[string]bool{in.cfg.ConfDir: false, in.cfg.BinDir: false}}
	now := in.now()
	removeStaleTemps(in.cfg.ConfDir, now)
	removeStaleTemps(in.cfg.BinDir, now)

	var events <-chan fsnotify.Event
	var errs <-chan error
	var poll <-chan time.Time
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Error(err, "No file watcher: polling the CNI directories instead", "interval", pollInterval)
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		poll = t.C
	} else {
		defer w.Close()
		r.w = w
		events, errs = w.Events, w.Errors
		r.addWatches()
	}
	watchTick := time.NewTicker(watchRetry)
	defer watchTick.Stop()
	resync := time.NewTicker(in.cfg.ResyncInterval)
	defer resync.Stop()
	r.timer = time.NewTimer(0)
	defer r.timer.Stop()
	r.pending, r.due, r.since, r.trigger = true, now, now, "start"

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if trigger := r.relevant(ev); trigger != "" {
				r.request(trigger, debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				r.request("overflow", 0)
				continue
			}
			log.Error(err, "File watcher")
		case <-watchTick.C:
			if r.w != nil && r.addWatches() {
				r.request("watch", 0)
			}
		case <-poll:
			r.request("poll", 0)
		case <-in.entryChanged:
			r.request(triggerSettings, 0)
		case <-resync.C:
			r.full = true
			r.request("resync", 0)
		case <-r.timer.C:
			r.pending = false
			r.runPass(ctx)
		}
	}
}

// triggerSettings names the passes SetExcludeNamespaces asks for.
const triggerSettings = "settings"

// runner is Run's state; only Run's goroutine touches it.
type runner struct {
	in      *Installer
	log     logr.Logger
	w       *fsnotify.Watcher
	watched map[string]bool

	timer   *time.Timer
	pending bool      // the timer is set for a pass
	due     time.Time // when
	since   time.Time // the trigger the pass answers came
	trigger string
	full    bool // the next pass re-hashes the binary

	notBefore time.Time   // the loop guard's delay
	writes    []time.Time // our writes within the guard's window
	backoff   time.Duration
	errDelay  time.Duration
	lastErr   string
}

// addWatches watches the directories not yet watched (again, after one
// was removed); it reports whether any watch was added.
func (r *runner) addWatches() (added bool) {
	have := r.w.WatchList()
	for dir, ok := range r.watched {
		if ok && slices.Contains(have, dir) {
			continue
		}
		r.watched[dir] = false
		if err := r.w.Add(dir); err != nil {
			continue // missing; the pass reports what that means
		}
		r.watched[dir] = true
		added = true
	}
	return added
}

// relevant names the trigger for an event we must answer, or "".
func (r *runner) relevant(ev fsnotify.Event) string {
	cfg := r.in.cfg
	switch {
	case ev.Name == cfg.ConfDir || ev.Name == cfg.BinDir:
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			r.watched[ev.Name] = false // gone with the directory; watchTick re-adds it
			return "watch"
		}
		return ""
	case filepath.Dir(ev.Name) == cfg.ConfDir && isConfigName(filepath.Base(ev.Name)):
		return "conf-dir"
	case filepath.Dir(ev.Name) == cfg.BinDir && filepath.Base(ev.Name) == PluginType:
		return "bin-dir"
	}
	return ""
}

// request schedules a pass after delay (no sooner than the loop guard
// allows); an earlier request already pending stands.
func (r *runner) request(trigger string, delay time.Duration) {
	now := time.Now()
	at := now.Add(delay)
	if at.Before(r.notBefore) {
		at = r.notBefore
	}
	if r.pending && !at.Before(r.due) {
		return
	}
	r.pending, r.due, r.since, r.trigger = true, at, now, trigger
	r.timer.Reset(at.Sub(now))
}

func (r *runner) runPass(ctx context.Context) {
	full := r.full
	r.full = false
	out, err := r.in.runPass(ctx, full)
	now := time.Now()
	if r.in.afterPass != nil {
		r.in.afterPass(err)
	}
	switch {
	case errors.Is(err, errDisabled):
		return
	case errors.Is(err, errSourceChanged):
		// Another writer is active: an attempt, for the loop guard.
		r.noteWrite(now, out.Primary)
		r.request("retry", settleRetry)
		return
	case errors.Is(err, errSettling):
		r.request("retry", settleRetry)
		return
	case err != nil:
		if msg := err.Error(); msg != r.lastErr {
			r.lastErr = msg
			if errors.Is(err, errNoConfDir) || errors.Is(err, errNoPrimary) {
				r.log.Info("Waiting for the primary CNI's config: meshlet-cni not installed", "reason", msg)
			} else {
				r.log.Error(err, "meshlet-cni not installed")
			}
		}
		r.errDelay = min(max(errRetry, 2*r.errDelay), r.in.cfg.ResyncInterval)
		r.request("retry", r.errDelay)
		return
	}
	if r.lastErr != "" {
		r.log.Info("meshlet-cni installed", "file", out.Conflist)
		r.lastErr = ""
	}
	r.errDelay = 0
	if out.Wrote || out.BinaryWrote {
		if f := r.in.cfg.OnReassert; f != nil {
			f(r.trigger, now.Sub(r.since))
		}
		file := out.Conflist
		if !out.Wrote {
			file = r.in.binaryPath()
		}
		if r.trigger != triggerSettings { // meshlet's own change, not a fight
			r.noteWrite(now, file)
		}
		return
	}
	if r.pruneWrites(now) == 0 {
		r.backoff = 0 // a quiet window: the fight, if any, is over
	}
}

// pruneWrites drops writes older than the guard's window.
func (r *runner) pruneWrites(now time.Time) int {
	g := r.in.guard
	i := 0
	for i < len(r.writes) && now.Sub(r.writes[i]) >= g.window {
		i++
	}
	r.writes = r.writes[i:]
	return len(r.writes)
}

// noteWrite is the loop guard. Our own write causes events and one more
// pass, which finds the file right and writes nothing; writing again and
// again means someone keeps undoing it, and answering at once would spin.
func (r *runner) noteWrite(now time.Time, file string) {
	r.pruneWrites(now)
	r.writes = append(r.writes, now)
	g := r.in.guard
	if len(r.writes) <= g.max {
		return
	}
	r.backoff = min(max(g.minDelay, 2*r.backoff), g.maxDelay)
	r.notBefore = now.Add(r.backoff)
	r.in.backoffs.Add(1)
	r.log.Info("Another writer keeps removing meshlet-cni from the CNI config: backing off",
		"file", file, "writes", len(r.writes), "window", g.window, "delay", r.backoff)
}
