package main

import (
	"strings"
	"testing"
)

// A scan's stream, as govulncheck v1.9.0 writes it (trimmed): one module
// vulnerability reached, one only imported, one in the standard library.
const scan = `{"config":{"go_version":"go1.26.8","db":"file:///cache/vulndb"}}
{"osv":{"id":"GO-1","summary":"grpc server panic"}}
{"osv":{"id":"GO-2","summary":"compress panic"}}
{"osv":{"id":"GO-3","summary":"net/http desync"}}
{"finding":{"osv":"GO-1","fixed_version":"v1.82.2","trace":[{"module":"google.golang.org/grpc","version":"v1.82.1"}]}}
{"finding":{"osv":"GO-1","fixed_version":"v1.82.2","trace":[{"module":"google.golang.org/grpc","version":"v1.82.1","package":"google.golang.org/grpc/internal/transport","function":"HandleStreams","receiver":"*http2Server"},{"module":"github.com/meshlet/meshlet","package":"github.com/meshlet/meshlet/draplugin","function":"Run","receiver":"*Driver"}]}}
{"finding":{"osv":"GO-2","fixed_version":"v1.20.2","trace":[{"module":"github.com/klauspost/compress","version":"v1.20.1","package":"github.com/klauspost/compress/zstd"}]}}
{"finding":{"osv":"GO-3","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Do","receiver":"*Client"},{"module":"github.com/meshlet/meshlet","package":"github.com/meshlet/meshlet/agent","function":"Probe"}]}}
`

func TestReachedModuleVulnerabilityFails(t *testing.T) {
	rep, err := read(strings.NewReader(scan))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if rep.write(&out) {
		t.Fatalf("a reached grpc vulnerability passed:\n%s", out.String())
	}
	for _, want := range []string{
		"GO-1 google.golang.org/grpc@v1.82.1 (fixed in v1.82.2): grpc server panic",
		"reached from github.com/meshlet/meshlet/draplugin.Driver.Run",
		"warning: meshlet's code reaches 1 known vulnerabilities in the standard library of go1.26.8",
		"GO-3 stdlib@v1.26.8 (fixed in v1.26.9)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "GO-2") {
		t.Errorf("an imported but never called vulnerability was reported:\n%s", out.String())
	}
}

func TestStandardLibraryOnlyWarns(t *testing.T) {
	var lines []string
	for _, l := range strings.Split(scan, "\n") {
		if !strings.Contains(l, "GO-1") {
			lines = append(lines, l)
		}
	}
	rep, err := read(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if !rep.write(&out) || !strings.Contains(out.String(), "warning") || !strings.Contains(out.String(), "no known vulnerability reached in the required modules") {
		t.Fatalf("standard-library findings only: want a pass with a warning, got:\n%s", out.String())
	}
}

func TestNotGovulncheckOutputIsAnError(t *testing.T) {
	for _, in := range []string{"", "not json", `{"osv":{"id":"GO-1"}}`} {
		if _, err := read(strings.NewReader(in)); err == nil {
			t.Errorf("%q: read succeeded, want an error (govulncheck did not run)", in)
		}
	}
}
