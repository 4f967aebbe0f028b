// Command meshlet is the node agent that enrolls pods into the mesh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent"
	"github.com/meshlet/meshlet/agent/debug"
	"github.com/meshlet/meshlet/internal/flagenv"
	"github.com/meshlet/meshlet/internal/logformat"
)

func main() { os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr)) }

// run is the daemon, or one of commands; it returns the exit status: 2 for
// a flag, argument or setting that cannot work, before anything starts; 1
// for a failure (and meshlet status: a node that is not OK).
func run(args, environ []string, stdout, stderr io.Writer) int {
	defer klog.Flush()
	cmd, hasCmd := findCommand(args)
	cfg := agent.DefaultConfig()
	fs := newFlagSet(&cfg)
	runCmd := func(context.Context, agent.Config, []string, io.Writer) error { return nil }
	// A command's own flags (status -o) are the command line's only: no
	// MESHLET_* variable sets them.
	own := map[string]bool{}
	if hasCmd {
		before := map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
		runCmd = cmd.setup(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !before[f.Name] {
				own[flagenv.EnvName(f.Name)] = true
			}
		})
	}
	prog := "meshlet"
	if hasCmd {
		prog += " " + cmd.name
	}
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", prog, err, prog)
		return 2
	}
	var failed refusal
	explainValues(fs, &failed)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	positional, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(stdout, fs, cmd, hasCmd)
		return 0
	}
	if err != nil {
		return usageErr(parseError(fs, err, failed))
	}
	if hasCmd {
		positional = positional[1:] // the command's name
	}
	switch {
	case hasCmd && len(positional) != cmd.nargs:
		return usageErr(fmt.Errorf("want %s, got %q", wantArgs(cmd), positional))
	case !hasCmd && len(positional) > 0:
		if c := flagenv.Closest(positional[0], commandNames()); c != "" {
			return usageErr(fmt.Errorf("unknown command %q (did you mean %s?)", positional[0], c))
		}
		return usageErr(fmt.Errorf("unexpected arguments %q: the daemon takes none; the commands are %s", positional, strings.Join(commandNames(), ", ")))
	}
	lookup := lookupIn(environ)
	envErr := flagenv.ApplyEnv(fs, func(k string) (string, bool) {
		if own[k] {
			return "", false
		}
		return lookup(k)
	})
	if envErr == nil {
		if cfg.LogFormat == "json" && fs.Lookup("vmodule").Value.String() != "" {
			// The JSON logger has one verbosity: -vmodule would do nothing.
			return usageErr(errors.New("--vmodule works only with --log-format=text"))
		}
		if err := logformat.Apply(cfg.LogFormat, cfg.LogVerbosity); err != nil {
			return usageErr(err)
		}
	}
	// Before the checks below: a misspelt variable may be why they fail.
	flagenv.WarnUnknownEnv(klog.Background(), fs, environ)
	if envErr != nil {
		return usageErr(envErr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if hasCmd {
		err := runCmd(ctx, cfg, positional, stdout)
		var usage usageError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &usage):
			return usageErr(usage.error)
		case errors.Is(err, debug.ErrNotHealthy):
			return 1 // the report says why
		}
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	if err := cfg.Validate(); err != nil {
		return usageErr(err)
	}
	if err := agent.Run(ctx, cfg); err != nil {
		klog.Background().Error(err, "meshlet failed")
		return 1
	}
	return 0
}

// wantArgs says what arguments cmd takes.
func wantArgs(cmd command) string {
	if cmd.nargs == 0 {
		return "no arguments"
	}
	return "one argument, " + cmd.args
}

// lookupIn is os.LookupEnv over environ ("NAME=value" entries, as
// os.Environ returns), so that tests pass their own environment.
func lookupIn(environ []string) func(string) (string, bool) {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, dup := env[k]; !dup { // the first wins, as in os.Getenv
				env[k] = v
			}
		}
	}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// newFlagSet registers the daemon's flags on a new flag set: cfg's, and
// klog's -vmodule.
func newFlagSet(cfg *agent.Config) *flag.FlagSet {
	fs := flag.NewFlagSet("meshlet", flag.ContinueOnError)
	addLogFlags(fs)
	cfg.AddFlags(fs)
	return fs
}

// addLogFlags exposes klog's -vmodule only (-v is a node setting, in
// agent.Config): meshlet logs to stderr, where the container runtime
// collects it.
func addLogFlags(fs *flag.FlagSet) {
	all := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(all)
	f := all.Lookup("vmodule")
	fs.Var(f.Value, f.Name, f.Usage)
}
