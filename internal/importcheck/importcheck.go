// Package importcheck holds a test helper for packages that small
// binaries link (meshlet-cni, meshlet-gate): they must import the standard
// library only.
package importcheck

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// StandardLibraryOnly fails t for every import outside the standard
// library in the non-test Go files of the current directory (a test's
// working directory is its package's), but for the packages allowed
// (themselves standard-library only, each with this test).
func StandardLibraryOnly(t *testing.T, why string, allowed ...string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !slices.Contains(allowed, path) {
				t.Errorf("%s imports %s: %s", f, path, why)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no imports read: the test reads nothing")
	}
}
