package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// Installer keeps meshlet-cni chained in the node's CNI config. Its
// methods may be called from any goroutine; passes are serialised.
type Installer struct {
	cfg Config

	mu sync.Mutex // one pass (or Uninstall) at a time; guards the fields below
	// entry is meshlet's entry as passes write it (SetExcludeNamespaces
	// changes it).
	entry    entry
	disabled bool // Uninstall ran: Run stops re-asserting until Install
	bin      binaryCache
	skips    map[string]string // file → the skip reason last logged

	installed atomic.Bool
	passes    atomic.Uint64
	writes    atomic.Uint64
	backoffs  atomic.Uint64

	// Seams for tests.
	write     writeFunc
	now       func() time.Time
	guard     guard
	afterPass func(error) // Run calls it after each pass it tried

	// entryChanged asks Run for a pass (SetExcludeNamespaces).
	entryChanged chan struct{}
}

// New checks cfg and returns an Installer; nothing is touched until
// Install or Run.
func New(cfg Config) (*Installer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ConfDir = filepath.Clean(cfg.ConfDir)
	cfg.BinDir = filepath.Clean(cfg.BinDir)
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	return &Installer{
		cfg:   cfg,
		entry: cfg.entry(),
		skips: map[string]string{},
		write: atomicfile.WriteWith,
		now:   time.Now,
		guard: defaultGuard,

		entryChanged: make(chan struct{}, 1),
	}, nil
}

// SetExcludeNamespaces replaces the entry's excludeNamespaces (the node's
// excluded namespaces changed while meshlet runs): Run writes the entry at
// once, and from then on the plugin lets pods of those namespaces start
// while meshlet is away. It reports whether the entry changed: when the
// list is the same, Run is not asked for a pass.
func (in *Installer) SetExcludeNamespaces(namespaces []string) (changed bool) {
	cfg := in.cfg
	cfg.ExcludeNamespaces = namespaces
	e := cfg.entry()
	in.mu.Lock()
	same := slices.Equal(e.ExcludeNamespaces, in.entry.ExcludeNamespaces)
	in.entry = e
	in.mu.Unlock()
	if same {
		return false
	}
	select {
	case in.entryChanged <- struct{}{}:
	default: // a pass is asked for already: it reads the new entry
	}
	return true
}

// Installed reports whether the last pass left meshlet chained in the
// config the runtime uses (and its binary in place): for readiness.
func (in *Installer) Installed() bool { return in.installed.Load() }

// Stats returns the counters.
func (in *Installer) Stats() Stats {
	return Stats{Passes: in.passes.Load(), Writes: in.writes.Load(), Backoffs: in.backoffs.Load()}
}

// Install makes one pass: the binary first (chaining a plugin the runtime
// cannot find would fail every pod), then the conflist. It writes nothing
// when both are already right. It undoes an earlier Uninstall's hold on
// Run.
func (in *Installer) Install(ctx context.Context) (Outcome, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.disabled = false
	return in.pass(ctx, true)
}

// errDisabled: Run's pass after Uninstall.
var errDisabled = errors.New("uninstalled")

// runPass is Run's pass: nothing once Uninstall has run.
func (in *Installer) runPass(ctx context.Context, full bool) (Outcome, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.disabled {
		return Outcome{}, errDisabled
	}
	return in.pass(ctx, full)
}

func (in *Installer) pass(ctx context.Context, full bool) (out Outcome, err error) {
	in.passes.Add(1)
	defer func() {
		in.installed.Store(err == nil)
		if out.Wrote || out.BinaryWrote {
			in.writes.Add(1)
		}
	}()
	// Before anything is written: a wrong plugin directory would make the
	// chain fail every pod of the node.
	if err := in.checkBinDir(ctx); err != nil {
		return out, err
	}
	out.BinaryWrote, err = in.ensureBinary(full)
	if err != nil {
		return out, err
	}
	if in.cfg.OwnConflist {
		err = in.ensureOwn(ctx, &out)
	} else {
		err = in.ensureChained(ctx, &out)
	}
	return out, err
}

// selectPrimary selects and logs the files skipped on the way, once per
// file and reason.
func (in *Installer) selectPrimary(ctx context.Context, skipName string) (*confFile, error) {
	sel, err := selectPrimary(in.cfg.ConfDir, skipName, in.now())
	log := klog.FromContext(ctx)
	seen := map[string]bool{}
	for _, s := range sel.skipped {
		seen[s.name] = true
		if in.skips[s.name] != s.reason {
			in.skips[s.name] = s.reason
			log.Info("Skipping a CNI config the runtime would not load", "file", filepath.Join(in.cfg.ConfDir, s.name), "reason", s.reason)
		}
	}
	for name := range in.skips {
		if !seen[name] {
			delete(in.skips, name)
		}
	}
	if err != nil {
		return nil, err
	}
	p := sel.primary
	if p.info.Mode()&os.ModeSymlink != 0 {
		// Renaming over it would replace the link (and leave its target
		// without meshlet); its target may well be read-only.
		return nil, fmt.Errorf("primary CNI config %s is a symbolic link: not editing through it (--cni-own-conflist writes a file of meshlet's own instead)", p.path)
	}
	if p.dirPlugins > 0 {
		return nil, fmt.Errorf("primary CNI config %s: the runtime adds %d plugins from %s after the conflist's own, so meshlet-cni would not run last: not supported",
			p.path, p.dirPlugins, filepath.Join(in.cfg.ConfDir, "<network name>"))
	}
	return p, nil
}

// ensureChained edits the primary's file: meshlet's entry appended (a
// .conf or .json is turned into a .conflist of the same stem first).
func (in *Installer) ensureChained(ctx context.Context, out *Outcome) error {
	log := klog.FromContext(ctx)
	// An own conflist left by an earlier OwnConflist run would shadow the
	// primary with a stale copy.
	own := filepath.Join(in.cfg.ConfDir, OwnConflistName)
	if data, err := os.ReadFile(own); err == nil && hasOurEntry(data) {
		if err := removeFile(own); err != nil {
			return fmt.Errorf("remove %s left by --cni-own-conflist: %w", own, err)
		}
		log.Info("Removed meshlet's own conflist left by an earlier --cni-own-conflist run", "file", own)
		out.Removed = append(out.Removed, own)
	}
	p, err := in.selectPrimary(ctx, "")
	if err != nil {
		return err
	}
	if src := in.rewrittenSource(p); src != nil {
		p = src
	}
	out.Primary = p.path
	if p.isList() {
		data, changed, err := chain(p.name, p.data, in.entry)
		if err != nil {
			return fmt.Errorf("primary CNI config %s: %w", p.path, err)
		}
		out.Conflist = p.path
		if !changed {
			return nil
		}
		if err := in.writeConfig(p.name, data, p.info.Mode(), p); err != nil {
			return err
		}
		out.Wrote = true
		log.Info("Chained meshlet-cni into the CNI config", "file", p.path)
		return nil
	}
	// A single-plugin config: the runtime loads X.conflist or X.conf
	// alike, so the conflist (chained) replaces the .conf.
	target := strings.TrimSuffix(p.name, filepath.Ext(p.name)) + ".conflist"
	targetPath := filepath.Join(in.cfg.ConfDir, target)
	data, err := convert(p.name, p.data, in.entry, true)
	if err != nil {
		return fmt.Errorf("primary CNI config %s: %w", p.path, err)
	}
	out.Conflist = targetPath
	existing, err := os.ReadFile(targetPath)
	switch {
	case err == nil && !bytes.Equal(existing, data) && !convertedFromHere(target, p.name, existing):
		return fmt.Errorf("primary CNI config %s: cannot convert it to %s: that file exists and meshlet did not write it", p.path, targetPath)
	case err == nil && bytes.Equal(existing, data):
	default:
		if err := in.writeConfig(target, data, p.info.Mode(), p); err != nil {
			return err
		}
		out.Wrote = true
	}
	// Only now, with the conflist in place: the runtime always has a config.
	if err := removeFile(p.path); err != nil {
		return fmt.Errorf("remove %s, converted to %s: %w", p.path, targetPath, err)
	}
	out.Removed = append(out.Removed, p.path)
	log.Info("Converted the CNI config to a conflist with meshlet-cni chained", "from", p.path, "file", targetPath)
	return nil
}

// ensureOwn writes OwnConflistName: the primary with meshlet chained.
func (in *Installer) ensureOwn(ctx context.Context, out *Outcome) error {
	p, err := in.selectPrimary(ctx, OwnConflistName)
	if err != nil {
		return err
	}
	out.Primary = p.path
	if p.name < OwnConflistName {
		return fmt.Errorf("%s sorts before %s, so the runtime uses it, not meshlet's conflist: rename it or run without --cni-own-conflist", p.path, OwnConflistName)
	}
	var data []byte
	if p.isList() {
		data, _, err = chain(OwnConflistName, p.data, in.entry)
	} else {
		data, err = convert(p.name, p.data, in.entry, false)
	}
	if err != nil {
		return fmt.Errorf("primary CNI config %s: %w", p.path, err)
	}
	path := filepath.Join(in.cfg.ConfDir, OwnConflistName)
	out.Conflist = path
	// The copy gets the primary's mode: a 0600 config may hold secrets.
	mode := p.info.Mode().Perm()
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == mode {
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
			return nil
		}
	}
	if err := in.writeConfig(OwnConflistName, data, mode, p); err != nil {
		return err
	}
	out.Wrote = true
	klog.FromContext(ctx).Info("Wrote meshlet's own conflist from the primary CNI config", "file", path, "primary", p.path)
	return nil
}

// rewrittenSource: p is a conflist meshlet converted from a .json that
// the primary CNI has since written again. X.conflist sorts before
// X.json, so the runtime would go on using our copy of the old one: the
// new one must be converted in its place. (A rewritten .conf sorts first
// and is the primary anyway.)
func (in *Installer) rewrittenSource(p *confFile) *confFile {
	cl, err := parseConflist(p.data)
	if err != nil {
		return nil
	}
	_, ours := cl.split()
	for _, e := range ours {
		from := convertedFromOf(e)
		if !validConvertedFrom(p.name, from) {
			continue
		}
		if src, err := loadConfig(in.cfg.ConfDir, from); err == nil && src.info.Mode().IsRegular() {
			return src
		}
	}
	return nil
}

// convertedFromHere: the conflist data is one convert made from from.
func convertedFromHere(target, from string, data []byte) bool {
	cl, err := parseConflist(data)
	if err != nil {
		return false
	}
	_, ours := cl.split()
	for _, p := range ours {
		if f := convertedFromOf(p); f == from && validConvertedFrom(target, f) {
			return true
		}
	}
	return false
}

// hasOurEntry: data is a conflist with a meshlet-cni entry.
func hasOurEntry(data []byte) bool {
	cl, err := parseConflist(data)
	if err != nil {
		return false
	}
	_, ours := cl.split()
	return len(ours) > 0
}
