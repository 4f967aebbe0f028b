//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "demo-dra: Linux only (containerd, a kubelet, network namespaces)")
	os.Exit(2)
}
