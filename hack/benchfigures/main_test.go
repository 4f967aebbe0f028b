package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkApplyNftables-2   	     300	    380000 ns/op	       320.0 p50-µs	      2000 p99-µs
BenchmarkApplyNftables-2   	     300	    400000 ns/op	       330.0 p50-µs	      2100 p99-µs
BenchmarkApplyNftables-2   	     300	    390000 ns/op	       310.0 p50-µs	      1900 p99-µs
BenchmarkIstioCreateInpodRules-2	300	7800000 ns/op	7040.0 p50-µs	9000.0 p99-µs
BenchmarkMeshletMemory/api/pods=100-2         	       1	18396963586 ns/op	        11.96 RssAnon-MiB	        37.83 RssFile-MiB	        49.78 VmRSS-MiB
BenchmarkRunPodSandbox/runtime=containerd/meshlet=host-2         	     100	  85857829 ns/op	         0.8333 enroll-p50-ms	         1.960 enroll-p99-ms	        84.04 runp-p50-ms
BenchmarkStrippedBinary/meshlet 1 67821730 bytes
BenchmarkApplyNftables-2 says hello
PASS
`

func TestFigures(t *testing.T) {
	in := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	// Two figures have no runs in the sample: exit 1, after the table.
	if code := run([]string{in}, &out, &errs); code != 1 {
		t.Fatalf("exit %d, want 1 for the missing figures: %s", code, errs.String())
	}
	for _, want := range []string{
		"0.39 / 0.32 ms", // medians of the three runs
		"7.80 / 7.04 ms",
		"20.0× / 22.0×",
		"49.8 MiB (12.0 + 37.8)",
		"0.83 / 1.96 ms",
		"67.8 MB",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "(not in the output)") || !strings.Contains(errs.String(), "2 figures not in") {
		t.Errorf("missing figures not reported:\n%s\n%s", out.String(), errs.String())
	}
}

func TestUsage(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(nil, &out, &errs); code != 2 {
		t.Fatalf("exit %d without arguments, want 2", code)
	}
	if code := run([]string{filepath.Join(t.TempDir(), "none")}, &out, &errs); code != 1 {
		t.Fatalf("exit %d for a missing file, want 1", code)
	}
}
