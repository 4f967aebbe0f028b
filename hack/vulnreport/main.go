// Command vulnreport reads govulncheck's -format json output on stdin and
// fails when meshlet's code reaches a known vulnerability in a module it
// requires; those in the standard library are printed as a warning (the
// machine's Go, not the module, fixes them).
package main

import (
	"fmt"
	"os"
)

func main() { os.Exit(run()) }

func run() int {
	rep, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck:", err)
		return 2
	}
	if !rep.write(os.Stdout) {
		return 1
	}
	return 0
}
