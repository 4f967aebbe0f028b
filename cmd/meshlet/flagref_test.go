package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/agent"
	"github.com/meshlet/meshlet/internal/flagenv"
)

var update = flag.Bool("update", false, "rewrite docs/flags.md from the flags (make docs)")

// flagReference is docs/flags.md's path from this package.
const flagReference = "../../docs/flags.md"

// TestFlagReference: docs/flags.md is the flags as meshlet registers them,
// so it cannot drift from `meshlet -h`. `make docs` rewrites it.
func TestFlagReference(t *testing.T) {
	cfg := agent.DefaultConfig()
	got := renderFlagReference(newFlagSet(&cfg))
	if *update {
		if err := os.WriteFile(flagReference, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(flagReference)
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/flags.md is not the flags meshlet registers: run make docs")
	}
}

// renderFlagReference is the Markdown reference of fs's flags, in their
// order by name.
func renderFlagReference(fs *flag.FlagSet) []byte {
	var b bytes.Buffer
	b.WriteString(`# meshlet's flags

<!-- Generated from the code by make docs (cmd/meshlet/flagref_test.go): do not edit. -->

Every flag of ` + "`meshlet`" + ` and its commands, as ` + "`meshlet -h`" + ` prints them. Each also
reads an environment variable, ` + "`" + flagenv.EnvPrefix + "`" + ` + the flag name in upper case with ` + "`-`" + `
as ` + "`_`" + `; the command line wins. An invalid value exits with status 2 and a message
naming the flag, before anything starts; a ` + "`" + flagenv.EnvPrefix + "*`" + ` variable no flag reads is
logged as a warning with the closest known name. The Helm chart sets each through
its values ([deploy/README.md](../deploy/README.md)).

| flag | environment variable | default | |
|---|---|---|---|
`)
	fs.VisitAll(func(f *flag.Flag) {
		def := f.DefValue
		if def == "" {
			def = "(none)"
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.Name, flagenv.EnvName(f.Name), def, markdownCell(f.Usage))
	})
	return b.Bytes()
}

// markdownCell escapes what would end a table cell.
func markdownCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
