// Command kubectl-meshlet is the kubectl plugin for meshlet: copied onto
// PATH, kubectl runs it as kubectl meshlet (docs/kubectl-plugin.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshlet/meshlet/kubectlmeshlet"
)

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return kubectlmeshlet.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}
