package redirect

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestSetIPv6: the node's IPv6 setting changed while meshlet runs. The
// account of a dual-stack pod changes with it, and re-programming the pod
// as the core does (Apply with its current record as prior: the rules
// replaced in place) leaves exactly the rules and routing a redirector
// started with that setting installs (the golden files of the
// dual cases). A pod with only IPv6 addresses is refused while it is off,
// naming the setting.
func TestSetIPv6(t *testing.T) {
	privtest.RequireRoot(t)
	ctx := context.Background()
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			r := newBareRedirector(t, b)
			pod := podNetns(t)
			dual := ruleCaseNamed(t, "dual")
			w := podWorkload(pod, dual.ips, dual.settings)
			account, err := r.Apply(ctx, w, nil)
			must(t, err)
			w.Redirection = account
			if now, err := r.Account(&w.Record); err != nil || now != account {
				t.Fatalf("Account = %q, %v; want Apply's %q", now, err, account)
			}
			golden := strings.TrimSuffix(string(b), "-legacy")
			for _, step := range []struct {
				ipv6   bool
				golden string
			}{{false, "dual_ipv6_disabled"}, {true, "dual"}} {
				r.SetIPv6(step.ipv6)
				now, err := r.Account(&w.Record)
				must(t, err)
				if now == w.Redirection {
					t.Fatalf("ipv6=%t: Account unchanged (%q): the core would not re-program the pod", step.ipv6, now)
				}
				current := w.Record
				applied, err := r.Apply(ctx, w, &current)
				must(t, err)
				if applied != now {
					t.Fatalf("ipv6=%t: Apply returned %q, Account said %q", step.ipv6, applied, now)
				}
				w.Redirection = applied
				// iptables leaves the tables it created, empty, behind
				// when the rules go (as it always has): not a difference.
				// Compared, never rewritten: TestGolden writes these files.
				compareGolden(t, golden+"_"+step.golden, withoutEmptyTables(rulesDump(t, pod, b))+routingDump(t, pod))
			}

			r.SetIPv6(false)
			v6pod := podNetns(t)
			v6only := podWorkload(v6pod, []netip.Addr{podV6}, enroll.Settings{DNSCapture: true})
			if _, err := r.Account(&v6only.Record); err == nil || !strings.Contains(err.Error(), "ipv6 node setting") {
				t.Fatalf("Account of an IPv6-only pod with IPv6 off = %v; want an error naming the ipv6 node setting", err)
			}
			if _, err := r.Apply(ctx, v6only, nil); err == nil || !strings.Contains(err.Error(), "ipv6 node setting") {
				t.Fatalf("Apply of an IPv6-only pod with IPv6 off = %v; want an error naming the ipv6 node setting", err)
			}
			if r.rulesPresent(netnstest.Fd(t, v6pod)) {
				t.Fatal("the refused pod has rules")
			}

			// One a previous agent programmed with IPv6 on is kept as it
			// is (a restart with IPv6 off), its rules put back as they were
			// if they are gone.
			r.SetIPv6(true)
			programmed, err := r.Apply(ctx, v6only, nil)
			must(t, err)
			before := rulesDump(t, v6pod, b)
			r.SetIPv6(false)
			prior := v6only.Record
			prior.Redirection = programmed
			if kept, err := r.Apply(ctx, v6only, &prior); err != nil || kept != programmed {
				t.Fatalf("Apply with the previous agent's record, IPv6 off = %q, %v; want its rules kept (%q)", kept, err, programmed)
			}
			if after := rulesDump(t, v6pod, b); after != before {
				t.Fatalf("kept rules changed:\n--- before\n%s\n--- after\n%s", before, after)
			}
			must(t, r.Remove(ctx, v6only, enroll.RemoveAll))
			if kept, err := r.Apply(ctx, v6only, &prior); err != nil || kept != programmed {
				t.Fatalf("Apply with the previous agent's record, its rules gone, IPv6 off = %q, %v; want them put back (%q)", kept, err, programmed)
			}
			if after := rulesDump(t, v6pod, b); after != before {
				t.Fatalf("rules put back differ:\n--- before\n%s\n--- after\n%s", before, after)
			}
			// An older meshlet's rules of the same plan are rewritten as
			// this one writes them; a record of another plan is no reason
			// to keep anything.
			backend, plan, _ := strings.Cut(programmed, " ")
			backend, _, _ = strings.Cut(backend, "/")
			prior.Redirection = backend + "/v0 " + plan
			if kept, err := r.Apply(ctx, v6only, &prior); err != nil || kept != programmed {
				t.Fatalf("Apply with an older meshlet's record, IPv6 off = %q, %v; want this one's rules (%q)", kept, err, programmed)
			}
			if after := rulesDump(t, v6pod, b); after != before {
				t.Fatalf("rewritten rules differ:\n--- before\n%s\n--- after\n%s", before, after)
			}
			prior.Redirection = backend + "/v1 ipv6 inbound-capture"
			if _, err := r.Apply(ctx, v6only, &prior); err == nil || !strings.Contains(err.Error(), "ipv6 node setting") {
				t.Fatalf("Apply with a record of another plan, IPv6 off = %v; want a refusal naming the ipv6 node setting", err)
			}
		})
	}
}

// withoutEmptyTables drops from an iptables-save dump the tables that hold
// nothing but built-in chains' policies of ACCEPT.
func withoutEmptyTables(dump string) string {
	var out, table strings.Builder
	empty := true
	for _, line := range strings.SplitAfter(dump, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table.Reset()
			empty = true
			table.WriteString(line)
		case table.Len() > 0:
			table.WriteString(line)
			if strings.HasPrefix(line, "COMMIT") {
				if !empty {
					out.WriteString(table.String())
				}
				table.Reset()
			} else if !strings.HasPrefix(line, ":") || !strings.Contains(line, " ACCEPT [") {
				empty = false
			}
		default:
			out.WriteString(line)
		}
	}
	return out.String()
}
