// Command meshlet-gate is the OCI createRuntime hook of meshlet's mesh
// device: the runtime runs it before each container that asked for the
// mesh starts, and it refuses the container unless meshlet says a pod in
// the container's network namespace is enrolled.
package main

import (
	"os"

	"github.com/meshlet/meshlet/draplugin/gate"
)

func main() { os.Exit(gate.Main(os.Args[1:], os.Stdin, os.Stderr)) }
