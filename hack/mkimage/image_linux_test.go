package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/meshlet/meshlet/internal/privtest"
	"github.com/meshlet/meshlet/test/env"
)

// built is the image the tests share: cross-compiling meshlet for each
// architecture is most of their time.
var built struct {
	once    sync.Once
	dir     string // holds the archive; removed by TestMain
	archive string
	meta    Meta
	plats   []Platform
	err     error
}

// platformsEnv names the image's architectures the tests build, as
// mkimage's -platforms flag takes them; unset, every one. make test builds
// the host's alone (a cold cross-build of meshlet is about 9 CPU-minutes
// per architecture) and make image-test every one.
const platformsEnv = "MESHLET_IMAGE_TEST_PLATFORMS"

// testPlatforms are the architectures platformsEnv names.
func testPlatforms() ([]Platform, error) {
	s := os.Getenv(platformsEnv)
	if s == "" {
		return Platforms, nil
	}
	plats, err := parsePlatforms(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", platformsEnv, err)
	}
	return plats, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// theImage builds the image once: the binaries, the Debian userspace, then
// the archive twice from them, which must come out byte for byte the same
// (the binaries' own reproducibility is the Go toolchain's, -trimpath).
func theImage(t *testing.T) (archive string, meta Meta) {
	t.Helper()
	privtest.RequireFile(t, "/usr/bin/dpkg-deb", "the image's iptables layer is made of Debian packages (apt-get download, dpkg-deb)")
	privtest.RequireFile(t, "/usr/bin/apt-get", "the image's iptables layer is made of Debian packages (apt-get download, dpkg-deb)")
	built.once.Do(func() { built.err = buildTwice(t) })
	if built.err != nil {
		t.Fatalf("build the image: %v", built.err)
	}
	return built.archive, built.meta
}

func buildTwice(t *testing.T) (err error) {
	ctx := t.Context()
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	if built.meta, err = gitMeta(ctx, root, "", ""); err != nil {
		return err
	}
	// A version of its own, so that finding it in the binaries shows it
	// was stamped in (what make image would use is TestVersionAsMakefile's).
	built.meta.Version = "v0.0.0-imagetest." + built.meta.Revision[:12]
	if built.dir, err = os.MkdirTemp("", "mkimage-test-"); err != nil {
		return err
	}
	if built.plats, err = testPlatforms(); err != nil {
		return err
	}
	unlock, err := privtest.LockBuilds()
	if err != nil {
		return err
	}
	start := time.Now()
	bins, err := buildBinaries(ctx, root, built.dir, built.meta.Version, built.plats)
	unlock()
	if err != nil {
		return err
	}
	t.Logf("cross-built meshlet, meshlet-cni and meshlet-gate for %s: %s", platformList(built.plats), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	us, err := Debian{MaxAge: 24 * time.Hour, Logf: t.Logf}.Userspace(ctx, built.plats)
	if err != nil {
		return err
	}
	t.Logf("Debian iptables userspace: %s", time.Since(start).Round(time.Millisecond))
	notices, err := readNotices(root)
	if err != nil {
		return err
	}
	if notices[ThirdPartyNotices], err = thirdPartyNotices(ctx, root); err != nil {
		return err
	}
	var sums []string
	for i := range 2 {
		start = time.Now()
		img, err := Assemble(Inputs{Meta: built.meta, Platforms: built.plats, Binaries: bins, Userspace: us, Notices: notices})
		if err != nil {
			return err
		}
		archive := filepath.Join(built.dir, fmt.Sprintf("image-%d.tar", i))
		if err := img.WriteArchive(archive); err != nil {
			return err
		}
		b, err := os.ReadFile(archive)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		sums = append(sums, hex.EncodeToString(sum[:]))
		t.Logf("archive %d: sha256:%s, %d bytes, index %s, assembled in %s", i, sums[i], len(b), img.Digest, time.Since(start).Round(time.Millisecond))
		for _, s := range img.Sizes {
			t.Logf("  %s: %d bytes uncompressed, %d compressed", s.Platform, s.Uncompressed, s.Compressed)
		}
		built.archive = archive
	}
	if sums[0] != sums[1] {
		return fmt.Errorf("not reproducible: two builds from the same inputs gave archives sha256:%s and sha256:%s", sums[0], sums[1])
	}
	return nil
}

// TestImageContents reads the archive as a runtime would (an OCI layout)
// and checks the index, the labels, the layers' tar entries and every file
// the image must hold, for each architecture.
func TestImageContents(t *testing.T) {
	archive, meta := theImage(t)
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpack the archive: %v: %s", err, out)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("read the OCI layout: %v", err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 {
		t.Fatalf("index.json has %d entries, want 1", len(tm.Manifests))
	}
	ref := Repository + ":" + meta.Version
	for _, k := range []string{"org.opencontainers.image.ref.name", "io.containerd.image.name"} {
		if got := tm.Manifests[0].Annotations[k]; got != ref {
			t.Errorf("index.json annotation %s = %q, want %q", k, got, ref)
		}
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.version":     meta.Version,
		"org.opencontainers.image.revision":    meta.Revision,
		"org.opencontainers.image.source":      "https://github.com/meshlet/meshlet",
		"org.opencontainers.image.title":       "meshlet",
		"org.opencontainers.image.description": Description,
		"org.opencontainers.image.created":     meta.Epoch.Format(time.RFC3339),
	}
	checkLabels(t, "index annotations", im.Annotations, wantLabels)
	var plats []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		plats = append(plats, d.Platform.String())
	}
	if want := strings.Split(platformList(built.plats), ","); !slices.Equal(plats, want) {
		t.Fatalf("platforms %v, want %v", plats, want)
	}
	if len(built.plats) < len(Platforms) {
		t.Logf("built %s of %s (%s)", platformList(built.plats), platformList(Platforms), platformsEnv)
	}
	for i, d := range im.Manifests {
		p := built.plats[i]
		t.Run(p.Arch, func(t *testing.T) {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Architecture != p.Arch || cf.OS != "linux" || cf.Variant != p.Variant {
				t.Errorf("config platform %s/%s/%s, want %s", cf.OS, cf.Architecture, cf.Variant, p)
			}
			if cf.Config.User != "0:0" {
				t.Errorf("User %q, want 0:0 (meshlet enters network namespaces as root)", cf.Config.User)
			}
			if want := []string{"/usr/local/bin/meshlet"}; !slices.Equal(cf.Config.Entrypoint, want) {
				t.Errorf("Entrypoint %q, want %q", cf.Config.Entrypoint, want)
			}
			if !cf.Created.Time.Equal(meta.Epoch) {
				t.Errorf("created %s, want %s", cf.Created.Time, meta.Epoch)
			}
			checkLabels(t, "labels", cf.Config.Labels, wantLabels)
			if l := cf.Config.Labels["org.opencontainers.image.licenses"]; l != "Apache-2.0" {
				t.Errorf("licenses label %q, want Apache-2.0 (the repository's LICENSE)", l)
			}
			if !strings.Contains(cf.Config.Labels[LabelDebianPackages], "iptables=") {
				t.Errorf("label %s = %q, want the Debian packages", LabelDebianPackages, cf.Config.Labels[LabelDebianPackages])
			}
			checkLayers(t, img, meta.Epoch)
			checkFiles(t, img, p, meta.Version)
		})
	}
}

func checkLabels(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
}

// checkLayers checks each layer's tar stream is what reproducibility needs:
// entries sorted, owned by 0:0 without names, every time the epoch.
func checkLayers(t *testing.T, img v1.Image, epoch time.Time) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 3 {
		t.Errorf("%d layers, want 3 (base, Debian, meshlet)", len(layers))
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		prev := ""
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			name := strings.TrimSuffix(h.Name, "/")
			if name <= prev {
				t.Errorf("layer %d: %s after %s: entries not sorted", i, name, prev)
			}
			prev = name
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
				t.Errorf("layer %d: %s owned by %d(%s):%d(%s), want 0:0 unnamed", i, name, h.Uid, h.Uname, h.Gid, h.Gname)
			}
			if !h.ModTime.Equal(epoch) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
				t.Errorf("layer %d: %s times %s/%s/%s, want %s only", i, name, h.ModTime, h.AccessTime, h.ChangeTime, epoch)
			}
		}
		rc.Close()
	}
}

// fsEntry is a file of the image's flattened filesystem.
type fsEntry struct {
	hdr  *tar.Header
	data []byte
}

// checkFiles flattens the image and checks meshlet's binaries (static,
// the right architecture, 0755, the version stamped in) and the iptables
// userspace: every command agent/redirect execs, and every ELF file's
// interpreter and DT_NEEDED libraries present, so nothing is missing at
// run time on either architecture (amd64 is also run in containerd below).
func checkFiles(t *testing.T, img v1.Image, p Platform, version string) {
	t.Helper()
	files := map[string]fsEntry{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.Trim(path.Clean("/"+h.Name), "/")] = fsEntry{h, b}
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Arch]
	for _, c := range Commands {
		name := BinDir + "/" + c.Name
		f, ok := files[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if f.hdr.Typeflag != tar.TypeReg || f.hdr.Mode != 0o755 {
			t.Errorf("%s: type %q mode %#o, want a regular file 0755", name, f.hdr.Typeflag, f.hdr.Mode)
		}
		ef, err := elf.NewFile(bytes.NewReader(f.data))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if ef.Machine != machine {
			t.Errorf("%s: machine %s, want %s", name, ef.Machine, machine)
		}
		for _, prog := range ef.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked (CGO_ENABLED=0 expected)", name)
			}
		}
		bi, err := buildinfo.Read(bytes.NewReader(f.data))
		if err != nil {
			t.Errorf("%s: build info: %v", name, err)
			continue
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		// -trimpath leaves -ldflags out of the build info: the version is
		// looked for in the binary instead.
		if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["GOARCH"] != p.Arch {
			t.Errorf("%s built with %v, want -trimpath, CGO_ENABLED=0, GOARCH=%s", name, settings, p.Arch)
		}
		if c.Name == "meshlet" && !bytes.Contains(f.data, []byte(version)) {
			t.Errorf("%s: version %s not stamped in", name, version)
		}
	}
	// The repository's licence and notice, as the Apache License asks of a
	// redistribution, byte for byte.
	for _, name := range NoticeFiles {
		want, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		f, ok := files[DocDir+"/"+name]
		switch {
		case !ok:
			t.Errorf("%s/%s missing", DocDir, name)
		case f.hdr.Mode != 0o644 || !bytes.Equal(f.data, want):
			t.Errorf("%s/%s: mode %#o, %d bytes, want 0644 and the repository's %s (%d bytes)", DocDir, name, f.hdr.Mode, len(f.data), name, len(want))
		}
	}
	// The NOTICE files of the modules linked in, grpc's among them.
	if f, ok := files[DocDir+"/"+ThirdPartyNotices]; !ok || !bytes.Contains(f.data, []byte("==== google.golang.org/grpc@")) {
		t.Errorf("%s/%s missing or without grpc's NOTICE", DocDir, ThirdPartyNotices)
	}
	libDirs := []string{"lib/" + p.Triplet, "usr/lib/" + p.Triplet, "lib", "usr/lib"}
	for _, c := range IptablesCommands {
		if _, err := resolveIn(files, c); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	elves := 0
	for name, f := range files {
		if f.hdr.Typeflag != tar.TypeReg || !bytes.HasPrefix(f.data, []byte(elf.ELFMAG)) {
			continue
		}
		elves++
		ef, err := elf.NewFile(bytes.NewReader(f.data))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if ef.Machine != machine {
			t.Errorf("%s: machine %s, want %s", name, ef.Machine, machine)
		}
		for _, prog := range ef.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := resolveIn(files, strings.TrimRight(string(b), "\x00")); err != nil {
				t.Errorf("%s: interpreter: %v", name, err)
			}
		}
		libs, err := ef.ImportedLibraries()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for _, lib := range libs {
			found := false
			for _, d := range libDirs {
				if _, err := resolveIn(files, path.Join(d, lib)); err == nil {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s needs %s: not in %v", name, lib, libDirs)
			}
		}
	}
	// The commands, their libraries and glibc's, and the extensions.
	if elves < 100 {
		t.Errorf("%d ELF files in the image: the xtables extensions are missing", elves)
	}
	t.Run("ldd", func(t *testing.T) { checkLoader(t, p.Arch, files) })
}

// loaders are glibc's dynamic loaders, by architecture.
var loaders = map[string]string{"amd64": "/lib64/ld-linux-x86-64.so.2", "arm64": "/lib/ld-linux-aarch64.so.1"}

// emulators are the qemu user-mode emulators (Debian's qemu-user-static)
// that run another architecture's image here.
var emulators = map[string]string{"amd64": "qemu-x86_64-static", "arm64": "qemu-aarch64-static"}

// checkLoader is ldd inside the image: the image's own loader, chrooted
// into the unpacked image, lists every ELF file's libraries, so a library
// found above only by a path glibc would not search fails here. Then the
// commands run: meshlet -h, and iptables and ipset print their versions.
// Another architecture's image runs under qemu's user-mode emulator,
// copied into the chroot.
func checkLoader(t *testing.T, arch string, files map[string]fsEntry) {
	privtest.RequireRoot(t) // chroot
	var emulate []string
	if arch != runtime.GOARCH {
		privtest.RequireCommand(t, emulators[arch], "runs the "+arch+" image here (hack/install-deps.sh installs qemu-user-static)")
		emulate = []string{"/" + emulators[arch]}
	}
	root := t.TempDir()
	names := slices.Sorted(maps.Keys(files)) // parents first
	for _, name := range names {
		f, full := files[name], filepath.Join(root, name)
		var err error
		switch f.hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(full, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(f.hdr.Linkname, full)
		case tar.TypeReg:
			err = os.WriteFile(full, f.data, os.FileMode(f.hdr.Mode).Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if emulate != nil {
		path, _ := exec.LookPath(emulators[arch])
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, emulate[0]), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) ([]byte, error) {
		return exec.Command("chroot", append(append([]string{root}, emulate...), args...)...).CombinedOutput()
	}
	loader := loaders[arch]
	n := 0
	for _, name := range names {
		f := files[name]
		if f.hdr.Typeflag != tar.TypeReg || !bytes.HasPrefix(f.data, []byte(elf.ELFMAG)) || strings.HasPrefix(name, BinDir+"/") {
			continue
		}
		n++
		out, err := run(loader, "--list", "/"+name)
		if err != nil || bytes.Contains(out, []byte("not found")) {
			t.Errorf("ldd /%s in the image: %v\n%s", name, err, out)
		}
	}
	t.Logf("the %s image's loader resolves the libraries of its %d ELF files%s", arch, n, map[bool]string{true: " (emulated)"}[emulate != nil])
	for _, cmd := range [][]string{{"/" + BinDir + "/meshlet", "-h"}, {"/usr/sbin/iptables-nft-save", "--version"}, {"/usr/sbin/iptables-legacy-save", "--version"}, {"/usr/sbin/ipset", "-h"}} {
		if out, err := run(cmd...); err != nil {
			t.Errorf("%s in the %s image: %v\n%s", strings.Join(cmd, " "), arch, err, out)
		}
	}
}

// resolveIn follows symlinks in the flattened filesystem to a regular file.
func resolveIn(files map[string]fsEntry, name string) (string, error) {
	cur := ""
	rest := strings.Split(strings.Trim(path.Clean("/"+name), "/"), "/")
	for hops := 0; len(rest) > 0; {
		next := path.Join(cur, rest[0])
		rest = rest[1:]
		f, ok := files[next]
		if !ok {
			return "", fmt.Errorf("%s: %s does not exist", name, next)
		}
		if f.hdr.Typeflag != tar.TypeSymlink {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: symlink loop", name)
		}
		target := f.hdr.Linkname
		if !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(next), target)
		}
		rest = append(strings.Split(strings.Trim(path.Clean("/"+target), "/"), "/"), rest...)
		cur = ""
	}
	if files[cur].hdr.Typeflag != tar.TypeReg {
		return "", fmt.Errorf("%s: %s is not a regular file", name, cur)
	}
	return cur, nil
}

// TestImageRunsInContainerd imports the archive into a real containerd
// (test/env: private paths, its own network namespace) with ctr, as a
// node's image import would, and runs the amd64 image: meshlet -h, and the
// iptables userspace restoring the rules meshlet renders (the golden files
// of agent/redirect) with both variants and families, and ipset, each in
// a container of its own with its own network namespace, given only
// CAP_NET_ADMIN on top of the runtime's default capabilities (which hold
// CAP_NET_RAW, which the legacy variant needs).
func TestImageRunsInContainerd(t *testing.T) {
	privtest.RequireRoot(t)
	bin := privtest.RequireEnv(t, "MESHLET_E2E_BIN", "the directory test/env/install-runtime.sh prints (containerd, ctr); `make test` sets it")
	archive, meta := theImage(t)
	// Short: containerd's socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "mlimg")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e, err := env.Start(env.Options{BinDir: bin, Dir: dir, Logf: t.Logf})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop containerd: %v", err)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("containerd's logs kept in %s/logs", dir)
		}
	})
	t.Logf("containerd started in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	if _, err := e.Ctr(2*time.Minute, "images", "import", "--all-platforms", archive); err != nil {
		t.Fatal(err)
	}
	out, err := e.Ctr(time.Minute, "images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	ref := meta.Ref()
	if !slices.Contains(strings.Fields(out), ref) {
		t.Fatalf("ctr images import did not name the image %s; images:\n%s", ref, out)
	}
	t.Logf("imported as %s in %s", ref, time.Since(start).Round(time.Millisecond))

	seq := 0
	run := func(extra []string, args ...string) (string, error) {
		seq++
		a := append([]string{"run", "--rm", "--runc-root", filepath.Join(dir, "runc-ctr")}, extra...)
		a = append(a, ref, fmt.Sprintf("mkimage-test-%d", seq))
		return e.Ctr(time.Minute, append(a, args...)...)
	}
	start = time.Now()
	out, err = run(nil, "/usr/local/bin/meshlet", "-h")
	if err != nil {
		t.Fatalf("meshlet -h in the image: %v", err)
	}
	for _, want := range []string{"Usage:", "meshlet COMMAND", "--redirect-backend"} {
		if !strings.Contains(out, want) {
			t.Errorf("meshlet -h in the image: no %q in\n%s", want, out)
		}
	}
	t.Logf("meshlet -h ran in %s", time.Since(start).Round(time.Millisecond))

	rules := splitGolden(t, "../../agent/redirect/testdata/iptables_restore_dual.golden")
	start = time.Now()
	for _, variant := range []string{"nft", "legacy"} {
		for _, fam := range []string{"IPv4", "IPv6"} {
			cmd := "iptables"
			if fam == "IPv6" {
				cmd = "ip6tables"
			}
			cmd = fmt.Sprintf("/usr/sbin/%s-%s-restore", cmd, variant)
			f := filepath.Join(dir, fam+".rules")
			if err := os.WriteFile(f, []byte(rules[fam]), 0o644); err != nil {
				t.Fatal(err)
			}
			// The image has no shell: the rules come in as a file.
			mount := []string{"--cap-add", "CAP_NET_ADMIN", "--mount", "type=bind,src=" + f + ",dst=/rules,options=rbind:ro"}
			if _, err := run(mount, cmd, "--noflush", "-w", "5", "/rules"); err != nil {
				t.Errorf("%s with meshlet's %s rules: %v", cmd, fam, err)
			}
		}
	}
	if _, err := run([]string{"--cap-add", "CAP_NET_ADMIN"}, "/usr/sbin/ipset", "create", ipsetName, "hash:ip", "family", "inet", "-exist"); err != nil {
		t.Errorf("ipset in the image: %v", err)
	}
	t.Logf("iptables userspace ran in %s", time.Since(start).Round(time.Millisecond))
}

// ipsetName is the set the iptables backend creates on the node.
const ipsetName = "meshlet-probes-v4"

// splitGolden reads agent/redirect's iptables-restore golden file, which
// holds the input for each family after a "# iptables-restore --noflush,
// <family>" line.
func splitGolden(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fam := ""
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "# iptables-restore --noflush, "); ok {
			fam = strings.TrimSpace(h)
			continue
		}
		if fam != "" {
			out[fam] += line
		}
	}
	if !strings.Contains(out["IPv4"], "-j REDIRECT") || !strings.Contains(out["IPv6"], "-j REDIRECT") {
		t.Fatalf("%s: no IPv4 and IPv6 rules found (its format changed?)", file)
	}
	return out
}
