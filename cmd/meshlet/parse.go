package main

import (
	"flag"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/agent"
)

// parseInterspersed parses fs's flags anywhere on the line, as kubectl
// and most CLIs do (meshlet probe readyz --health-socket=...), and
// returns the other arguments in order. After "--" everything is an
// argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// findCommand finds the command on the line: the first argument that is
// not a flag or a flag's value. Flags may come before it.
func findCommand(args []string) (command, bool) {
	takesValue := map[string]bool{}
	mark := func(fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			takesValue[f.Name] = !ok || !b.IsBoolFlag()
		})
	}
	cfg := agent.DefaultConfig()
	mark(newFlagSet(&cfg))
	for _, c := range commands {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs)
		mark(fs)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return lookupCommand(args[i+1])
			}
			return command{}, false
		case strings.HasPrefix(a, "-") && a != "-":
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] {
				i++ // its value
			}
		default:
			return lookupCommand(a)
		}
	}
	return command{}, false
}

func commandNames() []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return slices.Clone(names)
}
