package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ThirdPartyNotices is the file, in DocDir, holding the NOTICE files of the
// modules the binaries are built from: the Apache License asks that a
// redistribution carry each work's NOTICE.
const ThirdPartyNotices = "THIRD_PARTY_NOTICES"

// thirdPartyNotices concatenates the NOTICE files (NOTICE, NOTICE.txt,
// NOTICE.md) of every module Commands link for linux, sorted by module,
// each under a header naming the module and its version.
func thirdPartyNotices(ctx context.Context, root string) ([]byte, error) {
	args := []string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}@{{.Version}}\t{{.Dir}}{{end}}{{end}}"}
	for _, c := range Commands {
		args = append(args, c.Pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list the binaries' modules: %w", err)
	}
	modules := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if mod, dir, ok := strings.Cut(sc.Text(), "\t"); ok {
			modules[mod] = dir
		}
	}
	var b bytes.Buffer
	b.WriteString("The NOTICE files of the Go modules meshlet, meshlet-cni and meshlet-gate are built from.\n")
	for _, mod := range slices.Sorted(maps.Keys(modules)) {
		for _, name := range []string{"NOTICE", "NOTICE.txt", "NOTICE.md"} {
			text, err := os.ReadFile(filepath.Join(modules[mod], name))
			if err != nil {
				continue
			}
			fmt.Fprintf(&b, "\n==== %s (%s) ====\n\n%s", mod, name, text)
			if !bytes.HasSuffix(text, []byte("\n")) {
				b.WriteByte('\n')
			}
		}
	}
	return b.Bytes(), nil
}
