package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// results holds each benchmark's values by unit, one per run, by name
// without the GOMAXPROCS suffix.
type results map[string]map[string][]float64

// procs is the -N suffix go test gives a benchmark's name.
var procs = regexp.MustCompile(`-\d+$`)

// parse reads Go benchmark lines ("BenchmarkName-2  100  1234 ns/op
// 5.6 p50-µs"), skipping every other line.
func parse(r io.Reader) (results, error) {
	out := results{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; s.Scan(); n++ {
		f := strings.Fields(s.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		name := procs.ReplaceAllString(f[0], "")
		if out[name] == nil {
			out[name] = map[string][]float64{}
		}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: value %q: %w", n, name, f[i], err)
			}
			out[name][f[i+1]] = append(out[name][f[i+1]], v)
		}
	}
	return out, s.Err()
}

// median is the median of benchmark name's values in unit.
func (r results) median(name, unit string) (float64, bool) {
	v := slices.Clone(r[name][unit])
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}
