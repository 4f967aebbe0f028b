package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/internal/flagenv"
)

// printHelp writes meshlet --help (the commands, then the daemon's flags
// by area) or, for a command, its own help.
func printHelp(w io.Writer, fs *flag.FlagSet, cmd command, hasCmd bool) {
	if hasCmd {
		printCommandHelp(w, fs, cmd)
		return
	}
	fmt.Fprint(w, "meshlet is the node agent that enrolls pods into the mesh: it hooks pod creation in the container\n"+
		"runtime (NRI, or a chained CNI plugin), puts the in-pod redirection in place and hands each pod to\n"+
		"ztunnel before its containers start.\n\n"+
		"Usage:\n"+
		"  meshlet [flags]                    run the node agent\n"+
		"  meshlet COMMAND [flags] [ARGS]     run a command; flags may come anywhere on the line\n\n"+
		"Commands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-15s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'meshlet COMMAND --help' for a command's flags.\n\n"+
		"Flags. Every flag can also be set by its environment variable, %s + the flag name in upper\n"+
		"case with - as _ (shown with each flag); the command line wins. Other %s* variables are ignored\n"+
		"with a warning.\n", flagenv.EnvPrefix, flagenv.EnvPrefix)
	for _, g := range flagGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.flags {
			printFlag(w, fs.Lookup(name), true)
		}
	}
}

// printCommandHelp writes a command's usage, its help, its own flags and
// the daemon's flags it reads.
func printCommandHelp(w io.Writer, fs *flag.FlagSet, cmd command) {
	line := "meshlet " + cmd.name + " [flags]"
	if cmd.args != "" {
		line += " " + cmd.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", line, cmd.help)
	own := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	cmd.setup(own)
	if n := countFlags(own); n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		own.VisitAll(func(f *flag.Flag) { printFlag(w, fs.Lookup(f.Name), false) })
	}
	if len(cmd.reads) > 0 {
		fmt.Fprint(w, "\nSettings it reads (flag, or environment variable):\n")
		for _, name := range cmd.reads {
			printFlag(w, fs.Lookup(name), true)
		}
	}
	fmt.Fprint(w, "\nRun 'meshlet --help' for every flag.\n")
}

func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

// printFlag writes one flag as flag.PrintDefaults does, with two dashes,
// and (withEnv) its environment variable.
func printFlag(w io.Writer, f *flag.Flag, withEnv bool) {
	if f == nil {
		return
	}
	inner := *f
	switch e := f.Value.(type) {
	case explained:
		inner.Value = e.Value
	case explainedBool:
		inner.Value = e.Value
	}
	typ, usage := flag.UnquoteUsage(&inner)
	if typ == "value" {
		typ = "string" // meshlet's own values all take one
	}
	line := "  " + dashed(f.Name)
	if typ != "" {
		line += " " + typ
	}
	fmt.Fprintln(w, line)
	if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "[]" {
		usage += fmt.Sprintf(" (default %q)", def)
	}
	lines := wrap(usage, 96)
	if withEnv {
		// Unbroken, so that it can be searched for.
		env := "(env " + flagenv.EnvName(f.Name) + ")"
		if last := len(lines) - 1; len(lines[last])+1+len(env) <= 96 {
			lines[last] += " " + env
		} else {
			lines = append(lines, env)
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, "      "+l)
	}
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return slices.DeleteFunc(append(lines, line), func(l string) bool { return l == "" })
}
