package redirect

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestFailedRewriteKeepsPreviousRules: a running pod's rules rewritten for
// new settings (Apply with its current record as prior, as the core
// re-programs an enrolled pod) by a write the kernel refuses. The pod
// keeps exactly the rules and routing it had: a failed rewrite never
// takes a running pod's traffic off ztunnel. With iptables the IPv4
// family is written before the IPv6 one fails, so the previous rules are
// written back.
func TestFailedRewriteKeepsPreviousRules(t *testing.T) {
	privtest.RequireRoot(t)
	ctx := context.Background()
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			r := newBareRedirector(t, b)
			pod := podNetns(t)
			ips := []netip.Addr{podV4, podV6}
			w := podWorkload(pod, ips, enroll.Settings{DNSCapture: true})
			account, err := r.Apply(ctx, w, nil)
			must(t, err)
			current := w.Record
			current.Redirection = account
			before := fullDump(t, pod)

			failNextWrite(t, b)
			next := podWorkload(pod, ips, enroll.Settings{DNSCapture: false})
			_, err = r.Apply(ctx, next, &current)
			if err == nil {
				t.Fatal("Apply succeeded with a write the kernel refuses")
			}
			if strings.Contains(err.Error(), "restore the previous rules") {
				t.Fatalf("the previous rules could not be written back: %v", err)
			}
			if after := fullDump(t, pod); after != before {
				t.Fatalf("a failed rewrite changed the pod's rules\n--- after\n%s\n--- before\n%s", after, before)
			}

			// The next attempt (the core retries) succeeds and leaves what
			// a first enrollment with the new settings leaves.
			rewritten, err := r.Apply(ctx, next, &current)
			must(t, err)
			fresh := podNetns(t)
			freshAccount, err := r.Apply(ctx, podWorkload(fresh, ips, enroll.Settings{DNSCapture: false}), nil)
			must(t, err)
			if rewritten != freshAccount {
				t.Fatalf("rewritten account %q, a fresh pod's %q", rewritten, freshAccount)
			}
			if got, want := fullDump(t, pod), fullDump(t, fresh); got != want {
				t.Fatalf("rewritten pod differs from a fresh one\n--- rewritten\n%s\n--- fresh\n%s", got, want)
			}
		})
	}
}

// failNextWrite makes the backend's next rule write fail part-way: the
// nftables batches get a rule the kernel rejects (and with it the batch),
// the second iptables restore (IPv6, after IPv4 went in) a target that
// does not exist. Only once: the restore of the previous rules must work.
func failNextWrite(t *testing.T, b Backend) {
	t.Helper()
	if b == BackendNftables {
		// Two batches: the pod has the table, so the first (create) fails
		// on it anyway, and apply replaces it with the second.
		broken := 0
		nftBatchHook = func(b *nftBatch) {
			if broken < 2 {
				broken++
				b.addRule(TableName, "missing", 1, rule().tcp().accept())
			}
		}
		t.Cleanup(func() { nftBatchHook = nil })
		return
	}
	restores := 0
	iptablesRestoreHook = func(in string) string {
		restores++
		if restores == 2 {
			return strings.Replace(in, "*nat\n", "*nat\n-A ISTIO_OUTPUT -j NO_SUCH_TARGET\n", 1)
		}
		return in
	}
	t.Cleanup(func() { iptablesRestoreHook = nil })
}
