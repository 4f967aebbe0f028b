package redirect

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
)

// xtablesLock is the lock iptables-legacy takes for every change, in any
// network namespace.
const xtablesLock = "/run/xtables.lock"

// TestIptablesWaitEndsWithTheDeadline: an apply behind a held xtables lock
// (another program changing the legacy tables) fails when its caller's
// deadline passes, not after iptables' own wait, and names the deadline;
// the pod's namespace holds no rule of it.
func TestIptablesWaitEndsWithTheDeadline(t *testing.T) {
	pod := netnstest.Open(t)
	f, err := os.OpenFile(xtablesLock, os.O_CREATE|os.O_RDWR, 0o600)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	locked := true
	defer func() {
		if locked {
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		}
	}()
	p, err := PlanFor([]netip.Addr{netip.MustParseAddr("192.0.2.9")}, enroll.Settings{DNSCapture: true}, false)
	must(t, err)
	b := &iptablesBackend{variant: VariantLegacy}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, errors.New("the hook's deadline"))
	defer cancel()
	err = b.apply(ctx, netnstest.Fd(t, pod), p)
	if err == nil || !errors.Is(err, context.Cause(ctx)) {
		t.Fatalf("apply behind a held xtables lock = %v, want a failure naming the hook's deadline", err)
	}
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	locked = false
	if out := inNetns(t, pod, "iptables-legacy-save", "-t", "nat"); strings.Contains(out, ":ISTIO_PRERT") {
		t.Fatalf("the apply that ran out of time left rules:\n%s", out)
	}
}
