package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Repository is the image's name without the tag.
const Repository = "localhost/meshlet/meshlet"

// run is the command; it returns the exit status.
func run(args []string) int {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	out := fs.String("o", "bin/meshlet-image.tar", "the OCI archive to write")
	ver := fs.String("version", "", "image tag and meshlet's version (default: git describe --tags --exact-match, else dev)")
	rev := fs.String("revision", "", "the commit the image is built from (default: git rev-parse HEAD)")
	iptables := fs.Bool("iptables", true, "include Debian's iptables userspace (needs a Debian host with apt-get and dpkg-deb)")
	cache := fs.String("cache-dir", "", "where Debian packages are cached (default: $HOME/.cache/meshlet/image)")
	aptRefresh := fs.Duration("apt-max-age", 24*time.Hour, "refresh the cached Debian package lists when older than this")
	platforms := fs.String("platforms", platformList(Platforms), "the architectures to build, comma-separated (a subset of the default; the tests build only the host's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mkimage: unexpected arguments %q\n", fs.Args())
		return 2
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: -platforms: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "mkimage: "+format+"\n", a...) }
	ref, err := build(ctx, buildOptions{Out: *out, Version: *ver, Revision: *rev, Iptables: *iptables,
		CacheDir: *cache, AptMaxAge: *aptRefresh, Platforms: plats, Logf: logf})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		return 1
	}
	fmt.Println(ref)
	return 0
}

// buildOptions is one image build from the command line.
type buildOptions struct {
	Out, Version, Revision string
	Iptables               bool
	CacheDir               string
	AptMaxAge              time.Duration
	Platforms              []Platform
	Logf                   func(string, ...any)
}

// build builds the binaries and the image and writes the archive; it
// returns the image's reference.
func build(ctx context.Context, o buildOptions) (string, error) {
	root, err := repoRoot(ctx)
	if err != nil {
		return "", err
	}
	notices, err := readNotices(root)
	if err != nil {
		return "", err
	}
	if notices[ThirdPartyNotices], err = thirdPartyNotices(ctx, root); err != nil {
		return "", err
	}
	meta, err := gitMeta(ctx, root, o.Version, o.Revision)
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return "", fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(work)
	start := time.Now()
	bins, err := buildBinaries(ctx, root, work, meta.Version, o.Platforms)
	if err != nil {
		return "", err
	}
	o.Logf("built meshlet, meshlet-cni and meshlet-gate %s for %s in %s", meta.Version, platformList(o.Platforms), time.Since(start).Round(time.Millisecond))
	in := Inputs{Meta: meta, Platforms: o.Platforms, Binaries: bins, Notices: notices}
	if o.Iptables {
		start = time.Now()
		deb := Debian{CacheDir: o.CacheDir, MaxAge: o.AptMaxAge, Logf: o.Logf}
		if in.Userspace, err = deb.Userspace(ctx, o.Platforms); err != nil {
			return "", fmt.Errorf("iptables userspace (-iptables=false builds without it): %w", err)
		}
		o.Logf("Debian iptables userspace ready in %s", time.Since(start).Round(time.Millisecond))
	}
	img, err := Assemble(in)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return "", fmt.Errorf("output directory: %w", err)
	}
	if err := img.WriteArchive(o.Out); err != nil {
		return "", err
	}
	for _, s := range img.Sizes {
		o.Logf("%s: %d bytes uncompressed, %d compressed (%d layers)", s.Platform, s.Uncompressed, s.Compressed, s.Layers)
	}
	if fi, err := os.Stat(o.Out); err == nil {
		o.Logf("wrote %s (%d bytes, index %s)", o.Out, fi.Size(), img.Digest)
	}
	return img.Ref, nil
}

// Meta is what the image records about its source.
type Meta struct {
	Version, Revision string
	// Epoch is every timestamp in the image.
	Epoch time.Time
}

// Ref is the image's reference.
func (m Meta) Ref() string { return Repository + ":" + m.Version }

// gitMeta fills in the version (as the Makefile computes it), the revision
// and the timestamp: SOURCE_DATE_EPOCH, else HEAD's commit time.
func gitMeta(ctx context.Context, root, version, revision string) (Meta, error) {
	m := Meta{Version: version, Revision: revision}
	if m.Version == "" {
		// No tag on HEAD is not an error: the build is a dev build.
		if v, err := git(ctx, root, "describe", "--tags", "--exact-match"); err == nil && v != "" {
			m.Version = v
		} else {
			m.Version = "dev"
		}
	}
	if !validTag(m.Version) {
		return m, fmt.Errorf("version %q is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", m.Version)
	}
	if m.Revision == "" {
		rev, err := git(ctx, root, "rev-parse", "HEAD")
		if err != nil {
			return m, err
		}
		m.Revision = rev
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		ct, err := git(ctx, root, "log", "-1", "--format=%ct", "HEAD")
		if err != nil {
			return m, err
		}
		epoch = ct
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return m, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	m.Epoch = time.Unix(sec, 0).UTC()
	return m, nil
}

func validTag(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// repoRoot is the module's directory: builds and git run there whatever the
// working directory.
func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the meshlet module (go env GOMOD is empty)")
	}
	return filepath.Dir(gomod), nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// NoticeFiles are the repository's files every image ships in DocDir.
var NoticeFiles = []string{"LICENSE", "NOTICE"}

// readNotices reads NoticeFiles from the repository at root.
func readNotices(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, name := range NoticeFiles {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return nil, fmt.Errorf("the image ships the repository's %s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}
