package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/agent"
	"github.com/meshlet/meshlet/agent/debug"
	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/nodestatus"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/internal/flagvalue"
	"github.com/meshlet/meshlet/internal/version"
	"github.com/meshlet/meshlet/nriplugin"
)

// command runs once instead of the daemon.
type command struct {
	name string
	// args names its arguments in its usage line ("": none); nargs is
	// how many it takes.
	args  string
	nargs int
	// summary is its line in meshlet --help; help, its paragraph in
	// meshlet NAME --help.
	summary, help string
	// reads are the daemon's flags it reads (its help lists them).
	reads []string
	// setup registers its own flags on fs and returns what runs it: an
	// error it returns is a usage error (exit status 2).
	setup func(fs *flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error
}

// usageError is a command's refusal of its flags or arguments: exit
// status 2, with a pointer to its help.
type usageError struct{ error }

var cniFlags = []string{"cni-conf-dir", "cni-bin-dir", "cni-socket", "cni-plugin-binary", "cni-own-conflist", "excluded-namespaces", "remove-istio-cni-plugin"}

// commands are meshlet's commands, in the order meshlet --help lists them.
var commands = []command{
	{name: "status", summary: "how the node's mesh stands, and its pods; exit status 0 only when the node is OK",
		help: "status asks the running meshlet (its debug socket in --state-dir, and this meshlet's /readyz on\n" +
			"--health-socket) how the node stands: READY, STANDBY or NOT READY and why, the runtime hook, ztunnel's\n" +
			"connections, the API server, the mesh device and node taint, the settings, and the pods (failed first,\n" +
			"then enrolled; skipped pods with --all), each with a network namespace path nsenter --net= takes.\n\n" +
			"Exit status: 0 when the node is ready (or this meshlet is a ready standby beside a ready one) and no\n" +
			"mesh pod has failed; 1 when it is not (the output says why), also when no meshlet serves the node;\n" +
			"2 for a bad flag.",
		reads: []string{"state-dir", "health-socket"},
		setup: func(fs *flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error {
			var opts debug.StatusOptions
			output := "table"
			fs.Var(flagvalue.NewEnum(&output, "output format", debug.Outputs...), "o", "output format: "+strings.Join(debug.Outputs, ", "))
			fs.BoolVar(&opts.Brief, "brief", false, "print one line: the status, and why the node is not OK")
			fs.BoolVar(&opts.All, "all", false, "list skipped pods too")
			fs.StringVar(&opts.Namespace, "namespace", "", "list only the pods of this namespace")
			fs.Var(flagvalue.NewList(&opts.States), "state", "list only pods in these states (comma-separated): "+strings.Join(nodestatus.PodStates, ", "))
			return func(ctx context.Context, cfg agent.Config, _ []string, stdout io.Writer) error {
				opts.StateDir, opts.HealthSocket, opts.Output = cfg.StateDir, cfg.HealthSocket, output
				if err := opts.Validate(); err != nil {
					return usageError{err}
				}
				return debug.Status(ctx, opts, stdout)
			}
		}},
	{name: "version", summary: "meshlet's version, Go version and platform",
		help: "version prints this meshlet's version (the image's tag, else the module or VCS revision), the Go\n" +
			"version it was built with and its platform; -o json prints them as an object.",
		setup: func(fs *flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error {
			output := "text"
			fs.Var(flagvalue.NewEnum(&output, "output format", "text", "json"), "o", "output format: text, json")
			return func(_ context.Context, _ agent.Config, _ []string, stdout io.Writer) error {
				v := versionInfo{Version: version.String(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
				if output == "json" {
					return json.NewEncoder(stdout).Encode(v)
				}
				_, err := fmt.Fprintf(stdout, "meshlet %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
				return err
			}
		}},
	{name: "probe", args: strings.Join(health.ProbeEndpoints, "|"), nargs: 1,
		summary: "ask this meshlet for /readyz or /healthz; exit 0 when it answers ok (the DaemonSet's probes)",
		help:    "probe asks the meshlet on --health-socket for /readyz or /healthz and exits 0 when it answers ok,\n1 otherwise with its answer: the DaemonSet's exec probes.",
		reads:   []string{"health-socket"},
		setup: func(*flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error {
			return func(ctx context.Context, cfg agent.Config, args []string, stdout io.Writer) error {
				if !slices.Contains(health.ProbeEndpoints, args[0]) {
					return usageError{fmt.Errorf("endpoint %q: want one of %s", args[0], strings.Join(health.ProbeEndpoints, ", "))}
				}
				return health.Probe(ctx, cfg.HealthSocket, args[0], stdout)
			}
		}},
	{name: "enable-nri", summary: "check that the runtime's NRI socket answers, else print what to set (edits nothing)",
		help:  "enable-nri checks that the runtime's NRI socket answers, and otherwise prints what to set in the\nruntime's configuration to turn NRI on. It edits nothing; it exits 1 while NRI is off.",
		reads: []string{"nri-socket", "cri-socket"},
		setup: func(*flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error {
			return func(ctx context.Context, cfg agent.Config, _ []string, stdout io.Writer) error {
				return nriplugin.CheckNRI(ctx, cfg.NRI.SocketPath, cfg.CNI.CRISocket, stdout)
			}
		}},
	{name: "install-cni", summary: "chain meshlet-cni into the runtime's CNI configuration once (CNI mode)",
		help:  "install-cni chains meshlet-cni into the runtime's CNI configuration once, for nodes prepared before\nmeshlet runs: from then on the runtime refuses pods outside the excluded namespaces until meshlet\nserves them.",
		reads: cniFlags,
		setup: func(*flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error {
			return func(ctx context.Context, cfg agent.Config, _ []string, _ io.Writer) error {
				return cnifallback.Install(ctx, cfg.CNI, cfg.CNIExcluded())
			}
		}},
	{name: "uninstall-cni", summary: "remove what install-cni (or CNI mode) added to the CNI configuration",
		help:  "uninstall-cni removes meshlet-cni's entry and binary from the runtime's CNI configuration. Run it\nwith meshlet stopped: a running meshlet in CNI mode puts its entry back.",
		reads: cniFlags,
		setup: func(*flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error {
			return func(ctx context.Context, cfg agent.Config, _ []string, _ io.Writer) error {
				return cnifallback.Uninstall(ctx, cfg.CNI, cfg.CNIExcluded())
			}
		}},
	{name: "release-nodes", args: "NAMESPACE/DAEMONSET", nargs: 1,
		summary: "take meshlet's node taint and condition off every node (the chart's pre-delete hook)",
		help: "release-nodes marks meshlet's DaemonSet as being uninstalled, waits up to 30s for each node's meshlet\n" +
			"to take its --node-taint and --node-condition off, then takes off what is left: the chart's\n" +
			"pre-delete hook.",
		reads: []string{"kubeconfig", "node-taint", "node-condition"},
		setup: func(*flag.FlagSet) func(context.Context, agent.Config, []string, io.Writer) error {
			return func(ctx context.Context, cfg agent.Config, args []string, _ io.Writer) error {
				return agent.ReleaseNodes(ctx, cfg, args[0])
			}
		}},
}

// versionInfo is meshlet version -o json.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// lookupCommand returns the command named name.
func lookupCommand(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}
