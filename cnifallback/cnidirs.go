package cnifallback

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/cri"
)

// cniDirsReporter is a runtime that says where it keeps CNI (containerd).
type cniDirsReporter interface {
	CNIDirs(ctx context.Context) (cri.CNIDirs, bool, error)
}

var _ cniDirsReporter = (*cri.Lister)(nil)

// checkCNIDirs logs, once, the runtime's CNI directories as it reports
// them, and an error when --cni-conf-dir or --cni-bin-dir is not among
// them: meshlet would chain into a configuration the runtime does not
// read, or copy meshlet-cni where it does not look.
func (f *Fallback) checkCNIDirs(ctx context.Context, l cri.Listing) {
	if !f.cniDirsChecked.CompareAndSwap(false, true) {
		return
	}
	logger := klog.FromContext(ctx).WithValues("confDir", f.cfg.ConfDir, "binDir", f.cfg.BinDir)
	r, ok := l.(cniDirsReporter)
	var dirs cri.CNIDirs
	if ok {
		ctx, cancel := context.WithTimeout(ctx, cri.ListTimeout)
		var err error
		dirs, ok, err = r.CNIDirs(ctx)
		cancel()
		if err != nil {
			logger.Info("Cannot ask the runtime for its CNI directories", "err", err)
			return
		}
	}
	name, version := l.Runtime()
	logger = logger.WithValues("runtime", name, "runtimeVersion", version)
	switch {
	case !ok:
		logger.Info("The runtime does not report its CNI directories: using the flags'")
	case filepath.Clean(dirs.ConfDir) != filepath.Clean(f.cfg.ConfDir) || !slices.ContainsFunc(dirs.BinDirs, func(d string) bool { return filepath.Clean(d) == filepath.Clean(f.cfg.BinDir) }):
		logger.Error(nil, "The CNI directories differ from the runtime's: set --cni-conf-dir and --cni-bin-dir (the chart's paths.cniConfDir and paths.cniBinDir, or its platform) to the runtime's",
			"runtimeConfDir", dirs.ConfDir, "runtimeBinDirs", dirs.BinDirs)
	default:
		logger.V(2).Info("The CNI directories are the runtime's", "runtimeBinDirs", dirs.BinDirs)
	}
}

// runtimeDirsTTL is how long an answer of the runtime is kept: the
// installer asks at every pass, and the runtime's configuration changes
// only with a restart of its own.
const runtimeDirsTTL = time.Minute

// RuntimeBinDirs asks the runtime on criSocket (CRI Status) where it looks
// CNI plugins up, for CNI mode's installer (install.Config.RuntimeBinDirs). An answer, saying or not, is
// kept runtimeDirsTTL; a runtime that does not answer is asked again at
// the next pass.
func RuntimeBinDirs(criSocket string) func(ctx context.Context) ([]string, bool) {
	var mu sync.Mutex
	var at time.Time
	var ok bool
	var dirs []string
	return func(ctx context.Context) ([]string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < runtimeDirsTTL {
			return dirs, ok
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		l, err := cri.DialEndpoint(ctx, criSocket)
		if err != nil {
			return nil, false
		}
		defer l.Close()
		r, reports := l.(cniDirsReporter)
		if !reports {
			at, dirs, ok = time.Now(), nil, false
			return nil, false
		}
		d, said, err := r.CNIDirs(ctx)
		if err != nil {
			return nil, false
		}
		at, dirs, ok = time.Now(), d.BinDirs, said
		return dirs, ok
	}
}
