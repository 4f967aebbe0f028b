// Command binsize says what a Go binary's size is made of: the symbols of
// go tool nm -size, summed by where they come from (the standard library
// by top package, other modules by package up to the depth that names a
// part, e.g. k8s.io/api/core or k8s.io/client-go/informers), largest
// first. Code and read-only data are counted; the function tables
// (pclntab), which have no sized symbols, grow with the number of
// functions.
//
//	go run ./hack/binsize [-n 30] BINARY
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("binsize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	top := fs.Int("n", 30, "groups to print")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: binsize [-n N] BINARY")
		return 2
	}
	bin := fs.Arg(0)
	st, err := os.Stat(bin)
	if err != nil {
		fmt.Fprintln(stderr, "binsize:", err)
		return 1
	}
	out, err := exec.Command("go", "tool", "nm", "-size", "-sort", "size", bin).Output()
	if err != nil {
		fmt.Fprintf(stderr, "binsize: go tool nm %s: %v (a stripped binary has no symbols: build one without -ldflags -s)\n", bin, err)
		return 1
	}
	groups, total := sum(bytes.NewReader(out))
	fmt.Fprintf(stdout, "%s: %.1f MB on disk, %.1f MB in sized symbols\n", bin, float64(st.Size())/1e6, float64(total)/1e6)
	for _, g := range groups[:min(*top, len(groups))] {
		fmt.Fprintf(stdout, "%8.2f MB  %5.1f%%  %s\n", float64(g.size)/1e6, 100*float64(g.size)/float64(total), g.name)
	}
	return 0
}

type group struct {
	name string
	size int64
}

// sum reads go tool nm -size lines ("addr size type name") and sums sizes
// by group, largest first.
func sum(r io.Reader) ([]group, int64) {
	sizes := map[string]int64{}
	var total int64
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 4 {
			continue
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		// Code and read-only data only: package variables are a small
		// part of the file, and zeroed ones (bss) none of it.
		if err != nil || size <= 0 || !strings.ContainsAny(f[2], "TtRr") {
			continue
		}
		sizes[groupOf(strings.Join(f[3:], " "))] += size
		total += size
	}
	var out []group
	for n, sz := range sizes {
		out = append(out, group{n, sz})
	}
	slices.SortFunc(out, func(a, b group) int {
		if a.size != b.size {
			return int(b.size - a.size)
		}
		return strings.Compare(a.name, b.name)
	})
	return out, total
}

// depth is how many path elements name a part of a module: k8s.io/api/core
// (the core API group), k8s.io/client-go/informers.
var depth = map[string]int{"k8s.io": 3, "github.com": 3, "golang.org": 3, "google.golang.org": 2, "go.uber.org": 2, "go.yaml.in": 2}

// groupOf is the group of symbol name: its package path, cut to the depth
// that names a part.
func groupOf(name string) string {
	if strings.HasPrefix(name, "go:func.") {
		return "go:func.* (function metadata)"
	}
	name = strings.TrimPrefix(name, "type:")
	name = strings.TrimPrefix(name, "go:")
	name = strings.TrimPrefix(name, "itab.") // an itab: its type's
	name, _, _ = strings.Cut(name, ",")
	name = strings.TrimLeft(name, "*[]()")
	name, _, _ = strings.Cut(name, "[") // a generic's type arguments
	slash := strings.LastIndex(name, "/")
	pkg := name
	if dot := strings.Index(name[slash+1:], "."); dot >= 0 {
		pkg = name[:slash+1+dot]
	}
	parts := strings.Split(pkg, "/")
	if strings.HasPrefix(pkg, "github.com/meshlet/meshlet/") {
		parts = parts[:min(len(parts), 4)] // meshlet's own, by part
	} else if d, ok := depth[parts[0]]; ok && len(parts) > d {
		parts = parts[:d]
	} else if !strings.Contains(parts[0], ".") {
		parts = parts[:1] // the standard library, by top package
	}
	return strings.Join(parts, "/")
}
