// Command benchfigures prints meshlet's headline figures from the output of
// make bench (Go benchmark lines): the in-pod rule path against Istio's,
// the daemon's memory, the enrollment inside the runtime's hook and the
// binary's size, each the median of its runs, next to its goal.
//
//	go run ./hack/benchfigures bench.txt
package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: benchfigures BENCH_OUTPUT")
		return 2
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "benchfigures:", err)
		return 1
	}
	defer f.Close()
	results, err := parse(f)
	if err != nil {
		fmt.Fprintln(stderr, "benchfigures:", err)
		return 1
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "figure\tvalue\tgoal\t")
	missing := 0
	for _, fig := range figures {
		value, ok := fig.value(results)
		if !ok {
			value = "(not in the output)"
			missing++
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t\n", fig.name, value, fig.goal)
	}
	_ = w.Flush()
	if missing > 0 {
		fmt.Fprintf(stderr, "benchfigures: %d figures not in %s\n", missing, args[0])
		return 1
	}
	return 0
}
