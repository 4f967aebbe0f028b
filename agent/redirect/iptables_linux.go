package redirect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/meshlet/meshlet/agent/netns"
)

// iptablesBackend runs the iptables-restore/-save binaries of one variant
// inside the pod's netns (on a locked thread switched into it, which the
// child process inherits).
type iptablesBackend struct {
	variant IptablesVariant
}

func (b *iptablesBackend) bin(f Family, tool string) string {
	prefix := "iptables"
	if f == IPv6 {
		prefix = "ip6tables"
	}
	return fmt.Sprintf("%s-%s-%s", prefix, b.variant, tool)
}

// newIptables resolves the variant (auto: the one holding more of the
// node's rules, nft on a tie) and checks the binaries exist.
func newIptables(v IptablesVariant, hostNetnsFd int) (*iptablesBackend, error) {
	if v == "" {
		v = VariantAuto
	}
	if v == VariantAuto {
		v = detectVariant(hostNetnsFd)
	}
	b := &iptablesBackend{variant: v}
	for _, f := range []Family{IPv4, IPv6} {
		for _, tool := range []string{"save", "restore"} {
			if _, err := exec.LookPath(b.bin(f, tool)); err != nil {
				return nil, fmt.Errorf("iptables backend (%s variant) needs %s: %w (install Debian's iptables package)", v, b.bin(f, tool), err)
			}
		}
	}
	return b, nil
}

func detectVariant(hostNetnsFd int) IptablesVariant {
	count := func(v IptablesVariant) int {
		out, err := runIn(context.Background(), hostNetnsFd, fmt.Sprintf("iptables-%s-save", v), nil)
		if err != nil {
			return -1
		}
		return strings.Count(out, "\n-A ")
	}
	if count(VariantLegacy) > count(VariantNft) {
		return VariantLegacy
	}
	return VariantNft
}

// runIn runs a command in the netns (fd -1: the agent's own) with stdin,
// killing it if ctx ends first.
func runIn(ctx context.Context, netnsFd int, bin string, stdin []byte, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	run := func() error {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		return cmd.Run()
	}
	var err error
	if netnsFd < 0 {
		err = run()
	} else {
		err = netns.RunIn(netnsFd, run)
	}
	if err != nil {
		if cerr := context.Cause(ctx); cerr != nil {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return out.String(), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

func (b *iptablesBackend) save(ctx context.Context, fd int, f Family) (ruleset, error) {
	out, err := runIn(ctx, fd, b.bin(f, "save"), nil)
	if err != nil {
		return nil, err
	}
	return parseSave(out), nil
}

// iptablesRestoreHook, when set by a test, rewrites restore input (to
// inject a failure half-way).
var iptablesRestoreHook func(string) string

func (b *iptablesBackend) restore(ctx context.Context, fd int, f Family, input string) error {
	if input == "" {
		return nil
	}
	if iptablesRestoreHook != nil {
		input = iptablesRestoreHook(input)
	}
	// -w: wait for the xtables lock (the legacy variant's, shared by
	// every netns) instead of failing while another restore holds it, but
	// not past ctx's deadline (a runtime hook's): at most 5 s.
	_, err := runIn(ctx, fd, b.bin(f, "restore"), []byte(input), "--noflush", "-w", strconv.Itoa(lockWait(ctx)))
	return err
}

// lockWait is how many seconds iptables-restore may wait for the xtables
// lock: what is left of ctx's time, rounded up, from 1 to 5. The command
// is killed at the deadline in any case.
func lockWait(ctx context.Context) int {
	d, ok := ctx.Deadline()
	if !ok {
		return 5
	}
	return min(max(int(math.Ceil(time.Until(d).Seconds())), 1), 5)
}

func (b *iptablesBackend) apply(ctx context.Context, fd int, p Plan) error {
	for _, f := range []Family{IPv4, IPv6} {
		cur, err := b.save(ctx, fd, f)
		if err != nil {
			return err
		}
		input := renderRemove(cur)
		for _, pf := range p.Families {
			if pf == f {
				input = renderApply(p, f, cur)
			}
		}
		if err := b.restore(ctx, fd, f, input); err != nil {
			return fmt.Errorf("apply %s rules: %w", f, err)
		}
	}
	return nil
}

// present is always false: telling Istio's chains from a previous agent
// apart from anything else in the pod takes a save per family, which costs
// about what rewriting them does.
func (b *iptablesBackend) present(int) (bool, error) { return false, nil }

func (b *iptablesBackend) remove(ctx context.Context, fd int) error {
	var errs []error
	for _, f := range []Family{IPv4, IPv6} {
		cur, err := b.save(ctx, fd, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := b.restore(ctx, fd, f, renderRemove(cur)); err != nil {
			errs = append(errs, fmt.Errorf("remove %s rules: %w", f, err))
		}
	}
	return errors.Join(errs...)
}
