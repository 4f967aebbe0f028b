package agent

import (
	"context"
	"sync"
	"time"

	"github.com/meshlet/meshlet/agent/cri"
)

// cniDirsReporter is a runtime that says where it keeps CNI (containerd).
type cniDirsReporter interface {
	CNIDirs(ctx context.Context) (cri.CNIDirs, bool, error)
}

var _ cniDirsReporter = (*cri.Lister)(nil)

// runtimeDirsTTL is how long an answer of the runtime is kept: the
// installer asks at every pass, and the runtime's configuration changes
// only with a restart of its own.
const runtimeDirsTTL = time.Minute

// runtimeBinDirs asks the runtime on criSocket (CRI Status) where it looks
// CNI plugins up, for CNI mode's installer. An answer, saying or not, is
// kept runtimeDirsTTL; a runtime that does not answer is asked again at
// the next pass.
func runtimeBinDirs(criSocket string) func(ctx context.Context) ([]string, bool) {
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
