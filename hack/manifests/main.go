// Command manifests writes the files generated from the Helm chart
// (deploy/charts/meshlet): deploy's manifests and the chart's golden files
// (internal/helmchart.Files). Run from the repository's root, with
// MESHLET_HELM set to the directory hack/install-helm.sh prints; `make
// manifests` does both.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/meshlet/meshlet/internal/helmchart"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run() error {
	if _, err := os.Stat(helmchart.ChartDir); err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	h, err := helmchart.FromEnv(".")
	if err != nil {
		return err
	}
	files, err := h.Generate(context.Background())
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[p], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", p)
	}
	return nil
}
