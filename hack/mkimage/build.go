package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/meshlet/meshlet/internal/buildflags"
)

// Platform is one architecture of the image.
type Platform struct {
	// GOARCH, which is also the OCI architecture.
	Arch string
	// Variant is the OCI platform variant ("v8" for arm64, as registries
	// and containerd normalise it).
	Variant string
	// DebArch and Triplet are Debian's architecture and multiarch
	// directory name.
	DebArch, Triplet string
}

func (p Platform) String() string {
	if p.Variant != "" {
		return "linux/" + p.Arch + "/" + p.Variant
	}
	return "linux/" + p.Arch
}

// Platforms are the image's architectures, in index order.
var Platforms = []Platform{
	{Arch: "amd64", DebArch: "amd64", Triplet: "x86_64-linux-gnu"},
	{Arch: "arm64", Variant: "v8", DebArch: "arm64", Triplet: "aarch64-linux-gnu"},
}

// BinDir is where the binaries go in the image: meshlet takes meshlet-cni
// (CNI mode) and meshlet-gate (the mesh device's hook) from next to its
// own executable.
const BinDir = "usr/local/bin"

// Commands are the binaries the image holds, by package.
var Commands = []struct{ Name, Pkg string }{
	{"meshlet", "./cmd/meshlet"},
	{"meshlet-cni", "./cmd/meshlet-cni"},
	{"meshlet-gate", "./cmd/meshlet-gate"},
}

// Binaries are the files of Commands for one platform, by name.
type Binaries map[string]string

// buildBinaries cross-compiles Commands for each platform into
// dir/<arch>/, statically (CGO_ENABLED=0: the image has no libc for Go to
// link against in the meshlet layer), without paths or symbols
// (reproducible and smaller), with the version stamped in.
func buildBinaries(ctx context.Context, root, dir, version string, plats []Platform) (map[string]Binaries, error) {
	ldflags := "-s -w -X github.com/meshlet/meshlet/internal/version.Version=" + version
	out := map[string]Binaries{}
	for _, p := range plats {
		d := filepath.Join(dir, p.Arch)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("build directory: %w", err)
		}
		// One go build per platform for both commands: the packages they
		// share are loaded once. With several main packages, -o names a
		// directory.
		args := []string{"build", "-trimpath", "-tags", buildflags.Tags, "-ldflags", ldflags, "-o", d + string(filepath.Separator)}
		bins := Binaries{}
		for _, c := range Commands {
			args = append(args, c.Pkg)
			bins[c.Name] = filepath.Join(d, c.Name)
		}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+p.Arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %s (%s): %w: %s", strings.Join(args, " "), p, err, b)
		}
		out[p.Arch] = bins
	}
	return out, nil
}
