package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/internal/buildflags"
)

// maxStrippedSize bounds the shipped binary (static, stripped, with
// buildflags.Tags): 39.0 MB when it was set. A dependency that turns the
// linker's dead-method elimination off (TestShippedBinaryKeepsMethodElimination)
// adds about 29 MB; anything else this large is worth a look too.
const maxStrippedSize = 45_000_000

// TestShippedBinarySize builds meshlet as the image does and bounds its
// size: its code and function tables are what the daemon maps.
func TestShippedBinarySize(t *testing.T) {
	bin := buildMeshlet(t, "-s -w")
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > maxStrippedSize {
		t.Fatalf("stripped meshlet is %.1f MB, more than %.1f MB: go run ./hack/binsize on an unstripped build says what grew",
			float64(st.Size())/1e6, maxStrippedSize/1e6)
	}
	t.Logf("stripped meshlet: %.1f MB", float64(st.Size())/1e6)
}

// TestShippedBinaryKeepsMethodElimination: nothing in the shipped binary
// calls methods by a name known only at run time. Where something does
// (a template executor, reached through x/net/trace without the
// grpcnotrace tag), the linker keeps every exported method of every type
// put in an interface: most of client-go and the API types.
func TestShippedBinaryKeepsMethodElimination(t *testing.T) {
	bin := buildMeshlet(t, "-w") // symbols kept, for go tool nm
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, sym := range []string{"text/template.(*state).evalField", "html/template.(*Template).Execute"} {
		if strings.Contains(string(out), " "+sym+"\n") {
			t.Errorf("%s is linked: a template executor is reachable, and with it every exported method (build with -tags %s; go build -ldflags=-dumpdep ./cmd/meshlet says who reaches it)", sym, buildflags.Tags)
		}
	}
}

// TestMakefileBuildTags: make build uses the tags the image and the tests
// do.
func TestMakefileBuildTags(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^GO_TAGS\s*:=\s*(.*)$`).FindSubmatch(b)
	if m == nil || strings.TrimSpace(string(m[1])) != buildflags.Tags {
		t.Fatalf("Makefile's GO_TAGS is %q, internal/buildflags.Tags %q", m, buildflags.Tags)
	}
}

// buildMeshlet builds this command as hack/mkimage does (static,
// -trimpath, buildflags.Tags) with ldflags.
func buildMeshlet(t *testing.T, ldflags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshlet")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", buildflags.Tags, "-ldflags", ldflags, "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
