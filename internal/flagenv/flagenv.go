// Package flagenv gives every flag of a flag set an environment variable,
// which is how a DaemonSet sets it: MESHLET_ + the flag name in upper case
// with - as _. The command line wins; a MESHLET_* variable no flag reads is
// warned about, with the name it was probably meant to be.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// EnvPrefix prefixes the environment variable of every flag:
// --ztunnel-socket is MESHLET_ZTUNNEL_SOCKET.
const EnvPrefix = "MESHLET_"

// EnvName is the environment variable for a flag.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets every flag of fs that was not given on the command line
// from its environment variable, if present. Call it after fs.Parse: the
// command line wins.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		v, ok := lookup(EnvName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (flag --%s): %w", EnvName(f.Name), v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// DescribeEnv makes fs's usage (-h, or a bad flag) name each flag's
// environment variable, which is how a DaemonSet sets it. Call it once
// every flag is registered.
func DescribeEnv(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " (env " + EnvName(f.Name) + ")" })
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n"+
			"Every flag can also be set by its environment variable, %s + the flag name in upper case\n"+
			"with - as _ (shown with each flag); the command line wins. Other %s* variables are\n"+
			"ignored with a warning.\n", fs.Name(), EnvPrefix, EnvPrefix)
		fs.PrintDefaults()
	}
}

// WarnUnknownEnv logs a warning for each MESHLET_* variable in environ
// ("NAME=value", as os.Environ returns) that no flag of fs reads: a
// misspelt variable would otherwise be silently ignored, leaving its flag
// at the default. The warning names the closest variable a flag reads,
// when one is close enough to be the intended one.
func WarnUnknownEnv(logger klog.Logger, fs *flag.FlagSet, environ []string) {
	var known []string
	fs.VisitAll(func(f *flag.Flag) { known = append(known, EnvName(f.Name)) })
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || slices.Contains(known, name) {
			continue
		}
		kvs := []any{"variable", name}
		if c := closest(name, known); c != "" {
			kvs = append(kvs, "didYouMean", c)
		}
		// klog's structured API has no warning level: an Info at
		// verbosity 0 that says what it is.
		logger.Info("Warning: unknown environment variable ignored; no flag reads it", kvs...)
	}
}

// closest returns the variable nearest to name, or "" when even that
// one differs too much to be a typo of it.
func closest(name string, candidates []string) string {
	names := make([]string, len(candidates))
	for i, c := range candidates {
		names[i] = strings.TrimPrefix(c, EnvPrefix)
	}
	if c := Closest(strings.TrimPrefix(name, EnvPrefix), names); c != "" {
		return EnvPrefix + c
	}
	return ""
}

// Closest returns the candidate nearest to name in edit distance, or ""
// when even that one differs too much to be a slip: a few edits, and
// fewer than a third of its length.
func Closest(name string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		if d := editDistance(name, c); best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" || bestDist > 3 || bestDist*3 > len(best) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes: the
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
