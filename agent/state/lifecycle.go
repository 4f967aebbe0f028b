package state

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
)

// WriteInterval is how often the core's records are checked for
// changes and, if they changed, written. Writes never happen inside a
// runtime hook.
const WriteInterval = 2 * time.Second

// LoadAtStart reads the records a previous agent left. A corrupt
// checkpoint is set aside loudly and ignored; one of another format version
// (an upgrade) is ignored and replaced at the first write. Either way every
// running pod's rules are rewritten once, which is always correct.
//
// The records of another boot than bootID are dropped: the namespaces they
// name died with that boot, and the kernel has since handed their inodes
// and cookies to others; the pods the runtime runs now are enrolled
// afresh. Records of an older meshlet, whose boot is not known, are kept:
// the core adopts them only after checking each pod's addresses (see
// enroll.Record), and the redirector keeps rules only where they are.
func LoadAtStart(dir, bootID string, logger klog.Logger) []enroll.Record {
	if cut, err := RemoveCutWrites(dir); err != nil {
		logger.Error(err, "Removing the temporary files of unfinished checkpoint writes", "files", cut)
	} else if len(cut) > 0 {
		logger.Info("Removed the temporary files of checkpoint writes a killed meshlet never finished: the checkpoint before them stands", "files", cut)
	}
	cp, err := Load(dir)
	if errors.Is(err, ErrOtherVersion) {
		logger.Info("Checkpoint of another meshlet version ignored: every running pod's rules will be rewritten once", "reason", err)
		return nil
	}
	if errors.Is(err, ErrCorrupt) {
		moved, merr := SetAside(dir, time.Now())
		logger.Error(err, "Ignoring the checkpoint: every running pod's rules will be rewritten", "setAside", moved, "setAsideErr", merr)
		return nil
	}
	if err != nil {
		logger.Error(err, "Ignoring the checkpoint: every running pod's rules will be rewritten")
		return nil
	}
	switch cp.BootID {
	case bootID:
	case "":
		logger.Info("Checkpoint of an older meshlet: its pods are adopted once their addresses are checked", "pods", len(cp.Pods))
	default:
		logger.Info("Checkpoint of another boot ignored: its pods' network namespaces died with it, and the pods running now are enrolled afresh",
			"checkpointBootID", cp.BootID, "bootID", bootID, "pods", len(cp.Pods))
		return nil
	}
	logger.Info("Checkpoint loaded", "dir", dir, "pods", len(cp.Pods))
	return cp.Pods
}

// UIDs returns the UIDs of records.
func UIDs(records []enroll.Record) []string {
	uids := make([]string, len(records))
	for i, r := range records {
		uids[i] = r.UID
	}
	return uids
}

// Records is what the writer reads of the core: its published records
// and their generation.
type Records interface {
	Generation() uint64
	Records() ([]enroll.Record, uint64)
}

var _ Records = (*enroll.Core)(nil)

// RunWriter writes the core's records to the state dir whenever
// their generation moved, checked every tick and once more on the way out.
// Nothing is written before the first change: until the runtime has listed
// its pods, the previous agent's checkpoint is what a restart needs, and a
// meshlet that never reached the runtime (crash loop, runtime down) must
// not replace it with an empty one. It reads the core's published view: it
// never waits for a pod's enrollment.
//
// A write that fails (a full or read-only filesystem) changes nothing on
// disk and is retried at every tick; enrollments go on meanwhile. The
// first failure is logged, repeats only at -v=2, and the write that
// succeeds again says so; failed is called for each.
func RunWriter(ctx context.Context, dir, bootID string, core Records, failed func()) {
	logger := klog.FromContext(ctx)
	var written uint64 // the generation on disk; 0: the previous agent's file
	failing := false
	write := func() {
		if core.Generation() == written {
			return
		}
		records, gen := core.Records()
		if err := Save(dir, bootID, records); err != nil {
			failed()
			if !failing {
				logger.Error(err, "Writing the checkpoint failed, retrying every tick: enrollments go on, but a meshlet restarted meanwhile re-programs the pods the file on disk misses", "interval", WriteInterval)
			} else {
				logger.V(2).Info("Writing the checkpoint failed again", "err", err)
			}
			failing = true
			return
		}
		if failing {
			logger.Info("Checkpoint written again", "pods", len(records))
			failing = false
		}
		written = gen
	}
	tick := time.NewTicker(WriteInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			write()
			return
		case <-tick.C:
			write()
		}
	}
}
