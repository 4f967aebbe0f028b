package agent

import (
	"context"
	"sync"
	"time"

	"github.com/meshlet/meshlet/agent/cri"
)

// cniDirsReporter is a runtime that says where it keeps CNI (containerd).
type cniDirsReporter interface {
	CNIDirs(ctx context.Context) (cri.CNIDirs, bool)
}

var _ cniDirsReporter = (*cri.Lister)(nil)

// runtimeBinDirs asks the runtime on criSocket (CRI Status) where it looks
// CNI plugins up, for CNI mode's installer. Once the runtime has answered,
// saying or not, the answer is kept: the installer asks at every pass, and
// the runtime's configuration changes only with a restart of its own.
func runtimeBinDirs(criSocket string) func(ctx context.Context) ([]string, bool) {
	var mu sync.Mutex
	var answered, ok bool
	var dirs []string
	return func(ctx context.Context) ([]string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if answered {
			return dirs, ok
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		l, err := cri.DialEndpoint(ctx, criSocket)
		if err != nil {
			return nil, false
		}
		defer l.Close()
		answered = true
		if r, reports := l.(cniDirsReporter); reports {
			var d cri.CNIDirs
			d, ok = r.CNIDirs(ctx)
			dirs = d.BinDirs
		}
		return dirs, ok
	}
}
