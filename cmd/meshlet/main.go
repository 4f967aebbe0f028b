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
	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/internal/flagenv"
	"github.com/meshlet/meshlet/nriplugin"
)

func main() { os.Exit(run(os.Args[1:], os.Environ(), os.Stderr)) }

// command runs once instead of the daemon, with the daemon's flags and
// the arguments after them (arg names the one it takes; "": none).
type command struct {
	arg string
	run func(ctx context.Context, cfg agent.Config, arg string) error
}

var commands = map[string]command{
	"install-cni": {run: func(ctx context.Context, cfg agent.Config, _ string) error {
		return cnifallback.Install(ctx, cfg.CNI, cfg.CNIExcluded())
	}},
	"uninstall-cni": {run: func(ctx context.Context, cfg agent.Config, _ string) error {
		return cnifallback.Uninstall(ctx, cfg.CNI, cfg.CNIExcluded())
	}},
	"status": {run: func(ctx context.Context, cfg agent.Config, _ string) error {
		return debug.Status(ctx, cfg.StateDir, os.Stdout)
	}},
	"enable-nri": {run: func(ctx context.Context, cfg agent.Config, _ string) error {
		return nriplugin.CheckNRI(ctx, cfg.NRI.SocketPath, cfg.CNI.CRISocket, os.Stdout)
	}},
	"probe": {arg: strings.Join(health.ProbeEndpoints, "|"), run: func(ctx context.Context, cfg agent.Config, endpoint string) error {
		return health.Probe(ctx, cfg.HealthSocket, endpoint, os.Stdout)
	}},
	"release-nodes": {arg: "NAMESPACE/DAEMONSET", run: func(ctx context.Context, cfg agent.Config, ds string) error {
		return agent.ReleaseNodes(ctx, cfg, ds)
	}},
}

// run is the daemon, or one of commands; it returns the exit status: 2 for
// a setting that cannot work, before anything starts.
func run(args, environ []string, stderr io.Writer) int {
	defer klog.Flush()
	var name string
	if len(args) > 0 {
		if _, ok := commands[args[0]]; ok {
			name, args = args[0], args[1:]
		}
	}
	cmd := commands[name]
	cfg := agent.DefaultConfig()
	fs := newFlagSet(&cfg)
	fs.SetOutput(stderr)
	flagenv.DescribeEnv(fs)
	flagsUsage := fs.Usage
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "meshlet [status | enable-nri | install-cni | uninstall-cni] [flags]\n"+
			"meshlet probe [flags] readyz|healthz\n"+
			"meshlet release-nodes [flags] NAMESPACE/DAEMONSET\n"+
			"Without a command, meshlet runs the node agent. status prints the node's pods as the running\n"+
			"meshlet sees them (from its debug socket in --state-dir). enable-nri checks that the runtime's\n"+
			"NRI socket answers and otherwise prints what to set in the runtime's configuration (it edits\n"+
			"nothing). install-cni chains meshlet-cni into the runtime's CNI configuration once; uninstall-cni\n"+
			"removes what it added (both read the --cni-* flags). probe asks the meshlet on --health-socket\n"+
			"for /readyz or /healthz and exits 0 when it answers ok (the DaemonSet's probes). release-nodes\n"+
			"takes the --node-taint and --node-condition off every node before meshlet's DaemonSet is\n"+
			"deleted (the chart's pre-delete hook).\n\n")
		flagsUsage()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var arg string
	switch {
	case cmd.arg != "" && fs.NArg() != 1:
		fmt.Fprintf(stderr, "meshlet %s: want one argument, %s; got %q\n", name, cmd.arg, fs.Args())
		return 2
	case cmd.arg != "":
		arg = fs.Arg(0)
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "meshlet: unexpected arguments %q\n", fs.Args())
		return 2
	}
	// Before the checks below: a misspelt variable may be why they fail.
	flagenv.WarnUnknownEnv(klog.Background(), fs, environ)
	if err := flagenv.ApplyEnv(fs, lookupIn(environ)); err != nil {
		fmt.Fprintf(stderr, "meshlet: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if name != "" {
		if err := cmd.run(ctx, cfg, arg); err != nil {
			fmt.Fprintf(stderr, "meshlet %s: %v\n", name, err)
			return 1
		}
		return 0
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "meshlet: %v\n", err)
		return 2
	}

	if err := agent.Run(ctx, cfg); err != nil {
		klog.Background().Error(err, "meshlet failed")
		return 1
	}
	return 0
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

// newFlagSet registers every flag of meshlet, the daemon's and its
// commands', on a new flag set: cfg's, and the log flags.
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
