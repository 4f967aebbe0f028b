// Package buildflags says how meshlet's binaries are built, for every
// builder: the image (hack/mkimage), the end-to-end tests (test/env) and
// make build (the Makefile's GO_TAGS, checked against Tags).
package buildflags

// Tags are the build tags of every meshlet binary.
//
// grpcnotrace builds gRPC without golang.org/x/net/trace, which meshlet
// never turns on: its pages are rendered with html/template, and a
// reachable template executor calls methods by name at run time, so the
// linker keeps every exported method of every type the binary converts to
// an interface. Without it the meshlet binary is about 39 MB stripped
// rather than 68, and its function tables, which the garbage collector
// reads, half as long.
const Tags = "grpcnotrace"
