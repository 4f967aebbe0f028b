package main

import (
	"strings"
	"testing"
)

func TestParsePlatforms(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: the arches in order, or the error's text
		err      bool
	}{
		{in: "linux/amd64,linux/arm64/v8", want: "amd64 arm64"},
		{in: "linux/arm64, linux/amd64", want: "amd64 arm64"}, // index order whatever the flag's
		{in: "linux/arm64", want: "arm64"},
		{in: "linux/amd64", want: "amd64"},
		{in: "", want: `unknown platform ""`, err: true},
		{in: "linux/amd64,", want: `unknown platform ""`, err: true},
		{in: "linux/riscv64", want: `unknown platform "linux/riscv64" (known: linux/amd64,linux/arm64/v8)`, err: true},
		{in: "amd64", want: `unknown platform "amd64"`, err: true},
		{in: "linux/amd64,linux/amd64", want: `platform "linux/amd64" given twice`, err: true},
	} {
		got, err := parsePlatforms(tc.in)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parsePlatforms(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.want)
			}
			continue
		}
		var arches []string
		for _, p := range got {
			arches = append(arches, p.Arch)
		}
		if err != nil || strings.Join(arches, " ") != tc.want {
			t.Errorf("parsePlatforms(%q) = %v, %v; want %s", tc.in, arches, err, tc.want)
		}
	}
	if got := platformList(Platforms); got != "linux/amd64,linux/arm64/v8" {
		t.Errorf("platformList(Platforms) = %q", got)
	}
}
