package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/meshlet/meshlet/internal/flagenv"
)

// explained wraps a flag's value so that a bad one is refused with the
// form it wants ("want a duration such as 500ms or 2s") instead of the
// flag package's "parse error", and records which flag it was.
type explained struct {
	flag.Value
	name   string
	failed *refusal
}

// refusal is the last flag value refused, and why.
type refusal struct {
	name, value string
	err         error
}

func (e explained) Set(s string) error {
	if err := e.Value.Set(s); err != nil {
		err = explain(e.Value, err)
		*e.failed = refusal{e.name, s, err}
		return err
	}
	return nil
}

// explainedBool is explained for a boolean flag, which takes no value
// (--standalone): the flag package asks its value.
type explainedBool struct{ explained }

func (e explainedBool) IsBoolFlag() bool { return true }

// explain says what form v wants, when err does not already.
func explain(v flag.Value, err error) error {
	g, ok := v.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		return errors.New("want a duration such as 500ms, 1.5s or 2m")
	case bool:
		return errors.New("want true or false")
	case int, int64, uint, uint64:
		return errors.New("want a whole number")
	case float64:
		return errors.New("want a number")
	}
	return err
}

// explainValues wraps every flag of fs (see explained); failed is set to
// the flag and value refused.
func explainValues(fs *flag.FlagSet, failed *refusal) {
	fs.VisitAll(func(f *flag.Flag) {
		e := explained{Value: f.Value, name: f.Name, failed: failed}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			f.Value = explainedBool{e}
			return
		}
		f.Value = e
	})
}

// parseError rewrites an error of fs.Parse as one line that names the
// flag and what it wants: "--enroll-timeout=abc: want a duration ...",
// "unknown flag --ztunel-socket (did you mean --ztunnel-socket?)".
func parseError(fs *flag.FlagSet, err error, failed refusal) error {
	msg := err.Error()
	switch {
	case failed.name != "":
		return fmt.Errorf("%s=%q: %w", dashed(failed.name), failed.value, failed.err)
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag provided but not defined: "), "-")
		var known []string
		fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
		if c := flagenv.Closest(name, known); c != "" {
			return fmt.Errorf("unknown flag %s (did you mean %s?)", dashed(name), dashed(c))
		}
		return fmt.Errorf("unknown flag %s", dashed(name))
	case strings.HasPrefix(msg, "flag needs an argument: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag needs an argument: "), "-")
		return fmt.Errorf("%s needs a value (%s=VALUE)", dashed(name), dashed(name))
	}
	return err
}

// dashed is a flag's name as its help shows it: -o, --state-dir.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
