// Command meshlet is the node agent that enrolls pods into the mesh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent"
)

func main() { os.Exit(run()) }

func run() int {
	fs := flag.NewFlagSet("meshlet", flag.ContinueOnError)
	addLogFlags(fs)
	cfg := agent.DefaultConfig()
	cfg.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "meshlet: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := agent.ApplyEnv(fs, os.LookupEnv); err != nil {
		fmt.Fprintf(os.Stderr, "meshlet: %v\n", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "meshlet: %v\n", err)
		return 2
	}
	defer klog.Flush()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := agent.Run(ctx, cfg); err != nil {
		klog.Background().Error(err, "meshlet failed")
		return 1
	}
	return 0
}

// addLogFlags exposes klog's verbosity flags (-v, -vmodule) only: meshlet
// logs to stderr, where the container runtime collects it.
func addLogFlags(fs *flag.FlagSet) {
	all := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(all)
	for _, name := range []string{"v", "vmodule"} {
		f := all.Lookup(name)
		fs.Var(f.Value, f.Name, f.Usage)
	}
}
