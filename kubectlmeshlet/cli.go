package kubectlmeshlet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/meshlet/meshlet/internal/flagenv"
)

// Exit statuses of kubectl-meshlet.
const (
	// ExitOK: done, and every node is healthy (status), every check
	// passed or only warned (precheck).
	ExitOK = 0
	// ExitFindings: done, and something is wrong in the cluster: a node
	// not healthy or not reached (status), a check failed (precheck).
	ExitFindings = 1
	// ExitUsage: the command line is wrong; nothing was asked.
	ExitUsage = 2
	// ExitError: the cluster could not be asked (kubeconfig, API server,
	// no meshlet DaemonSet), or the report not written.
	ExitError = 3
)

// globalFlags are every command's: where the cluster is and where meshlet
// runs in it.
type globalFlags struct {
	kubeconfig string
	context    string
	// namespace is meshlet's (-n); "": every namespace, where the
	// DaemonSet is found by selector.
	namespace string
	selector  string
}

func (g *globalFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&g.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&g.context, "context", "", "the kubeconfig context to use (default: its current context)")
	fs.StringVarP(&g.namespace, "namespace", "n", "", "meshlet's namespace (default: every namespace, where a DaemonSet matching --selector is looked for)")
	fs.StringVarP(&g.selector, "selector", "l", DefaultSelector, "label selector of meshlet's DaemonSets (the chart's app.kubernetes.io/name, which nameOverride changes)")
}

// command is one of kubectl-meshlet's subcommands.
type command struct {
	name, summary, help string
	// flags adds the command's own flags and returns its run.
	flags func(fs *pflag.FlagSet) runFunc
}

// runFunc runs a command against the cluster. check, when set, checks
// the command's flags before anything is asked of the cluster.
type runFunc struct {
	check func() error
	run   func(ctx context.Context, c *cluster, out io.Writer) (int, error)
}

var commands = []command{statusCommand, versionCommand, precheckCommand, bugReportCommand}

// usageError is a wrong command line: printed with where the help is,
// exit status 2.
type usageError struct {
	err  error
	help string // the command line that prints the help
}

func (e usageError) Error() string { return e.err.Error() }

// connectFunc makes the cluster client from the global flags; tests
// replace it with a fake cluster.
type connectFunc func(ctx context.Context, g globalFlags) (*cluster, error)

// Run is kubectl-meshlet with args (without the program's name): it
// prints to stdout, errors to stderr, and returns the exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr, connect)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, conn connectFunc) int {
	code, err := runCommand(ctx, args, stdout, conn)
	if err == nil {
		return code
	}
	var usage usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(stderr, "kubectl meshlet: %v\nRun '%s' for usage.\n", oneLine(err), usage.help)
		return ExitUsage
	}
	fmt.Fprintf(stderr, "kubectl meshlet: %v\n", oneLine(err))
	return code
}

// runCommand finds the command on the line, parses its flags (anywhere
// on the line), connects and runs it.
func runCommand(ctx context.Context, args []string, stdout io.Writer, conn connectFunc) (int, error) {
	topHelp := usageError{help: "kubectl meshlet --help"}
	i, name := findCommand(args)
	if name == "" {
		if slices.ContainsFunc(args, isHelp) || len(args) == 0 {
			printUsage(stdout)
			return ExitOK, nil
		}
		topHelp.err = errors.New("no command given (want one of " + strings.Join(commandNames(), ", ") + ")")
		if f := firstUnknownFlag(args); f != "" {
			topHelp.err = fmt.Errorf("unknown flag %s before the command", f)
		}
		return ExitUsage, topHelp
	}
	if name == "help" {
		printUsage(stdout)
		return ExitOK, nil
	}
	cmd, ok := lookupCommand(name)
	if !ok {
		topHelp.err = fmt.Errorf("unknown command %q", name)
		if s := flagenv.Closest(name, commandNames()); s != "" {
			topHelp.err = fmt.Errorf("unknown command %q (did you mean %s?)", name, s)
		}
		return ExitUsage, topHelp
	}
	rest := slices.Concat(args[:i], args[i+1:])
	var g globalFlags
	fs := newFlagSet(cmd.name)
	g.add(fs)
	runCmd := cmd.flags(fs)
	help := "kubectl meshlet " + cmd.name + " --help"
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printCommandHelp(stdout, cmd, fs)
			return ExitOK, nil
		}
		return ExitUsage, usageError{err: explainFlagError(err, fs), help: help}
	}
	if runCmd.check != nil {
		if err := runCmd.check(); err != nil {
			return ExitUsage, usageError{err: err, help: help}
		}
	}
	if fs.NArg() > 0 {
		return ExitUsage, usageError{err: fmt.Errorf("%s takes no arguments, got %q", cmd.name, fs.Args()), help: help}
	}
	c, err := conn(ctx, g)
	if err != nil {
		return ExitError, err
	}
	return runCmd.run(ctx, c, stdout)
}

// explainFlagError says what a refused flag wants, and the flag meant by
// an unknown one, instead of pflag's parser's words.
func explainFlagError(err error, fs *pflag.FlagSet) error {
	var notExist *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	switch {
	case errors.As(err, &notExist) && notExist.GetSpecifiedName() != "":
		name := notExist.GetSpecifiedName()
		var names []string
		fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		if s := flagenv.Closest(name, names); s != "" {
			return fmt.Errorf("unknown flag --%s (did you mean --%s?)", name, s)
		}
		return fmt.Errorf("unknown flag --%s", name)
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		want := "want a " + f.Value.Type()
		if t := f.Value.Type(); strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") {
			want = "want a whole number"
		}
		return fmt.Errorf("--%s=%q: %s", f.Name, invalid.GetValue(), want)
	}
	return err
}

func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help printed by us
	fs.SortFlags = false
	return fs
}

// valueFlags are the flags, of any command, that take a value: findCommand
// skips their values.
var valueFlags = []string{"--kubeconfig", "--context", "-n", "--namespace", "-l", "--selector", "--node", "-o", "--output", "-f", "--file", "--tail", "--timeout"}

// findCommand returns the command's name and its index: the first
// argument that is neither a flag nor a flag's value ("" when none).
func findCommand(args []string) (int, string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return -1, ""
		case strings.HasPrefix(a, "-") && a != "-":
			if !strings.Contains(a, "=") && slices.Contains(valueFlags, a) {
				i++
			}
		default:
			return i, a
		}
	}
	return -1, ""
}

func isHelp(a string) bool { return a == "-h" || a == "--help" }

// firstUnknownFlag is the first flag on a line without a command that no
// command has (a typo), or "".
func firstUnknownFlag(args []string) string {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if strings.HasPrefix(a, "-") && !isHelp(a) && !slices.Contains(valueFlags, name) && name != "--all" {
			return name
		}
	}
	return ""
}

func lookupCommand(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

func commandNames() []string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	return names
}

// oneLine keeps an error on one line: API errors can carry a response
// body.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `kubectl meshlet: meshlet across the cluster, as each node's meshlet sees it.

Usage:
  kubectl meshlet COMMAND [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fs := newFlagSet("global")
	var g globalFlags
	g.add(fs)
	fmt.Fprintf(w, "\nFlags of every command:\n%s\n", fs.FlagUsages())
	fmt.Fprint(w, `Exit status: 0 done and healthy; 1 a node is not healthy or a check failed;
2 a wrong command line; 3 the cluster could not be asked.

Run 'kubectl meshlet COMMAND --help' for a command's flags.
`)
}

func printCommandHelp(w io.Writer, c command, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "kubectl meshlet %s: %s\n\n%s\n\nFlags:\n%s", c.name, c.summary, strings.TrimSpace(c.help), fs.FlagUsages())
}
