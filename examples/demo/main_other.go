//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "demo: Linux only (containerd, network namespaces)")
	os.Exit(2)
}
