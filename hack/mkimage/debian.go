package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DebianPackages hold the iptables backend's userspace and everything it
// links against, for each architecture: iptables, ipset and their
// dependencies (apt-cache depends) but netbase, which is Architecture: all
// (DebianAllPackages), and kmod, which only iptables-legacy's module
// autoloading uses (a container cannot load modules).
var DebianPackages = []string{
	"iptables", "libip4tc2", "libip6tc2", "libxtables12", "libnftnl11", "libmnl0",
	"libnetfilter-conntrack3", "libnfnetlink0", "ipset", "libipset13", "libc6",
}

// DebianAllPackages are architecture-independent: netbase's /etc/protocols,
// which iptables reads to name a protocol it has no built-in name for.
var DebianAllPackages = []string{"netbase"}

// IptablesCommands are the commands agent/redirect execs with
// --redirect-backend=iptables (both variants, both families; ipset for the
// node's probe SNAT), looked up on PATH.
var IptablesCommands = []string{
	"usr/sbin/iptables-nft-save", "usr/sbin/iptables-nft-restore",
	"usr/sbin/ip6tables-nft-save", "usr/sbin/ip6tables-nft-restore",
	"usr/sbin/iptables-legacy-save", "usr/sbin/iptables-legacy-restore",
	"usr/sbin/ip6tables-legacy-save", "usr/sbin/ip6tables-legacy-restore",
	"usr/sbin/ipset",
}

// Debian fetches and unpacks DebianPackages for an architecture, with
// apt-get and dpkg-deb from the host, into a cache.
type Debian struct {
	// CacheDir defaults to $MESHLET_CACHE/image, else
	// $HOME/.cache/meshlet/image; below it,
	// debian-<VERSION_ID>/ holds apt's private state (apt/), the .deb
	// files (debs/) and each unpacked set (root/<arch>-<key>/, key: the
	// packages' versions).
	CacheDir string
	// MaxAge: package lists older than this are refreshed (apt-get update
	// into the private state).
	MaxAge time.Duration
	Logf   func(string, ...any)
}

// Userspace is the Debian layer's content for one architecture.
type Userspace struct {
	// Root is the unpacked packages; Files the paths below it the layer
	// holds (regular files and symlinks, relative).
	Root  string
	Files []string
	// Packages are the packages' "name=version", sorted.
	Packages []string
}

// Userspace prepares the iptables userspace of each platform.
func (d Debian) Userspace(ctx context.Context, plats []Platform) (map[string]*Userspace, error) {
	if d.Logf == nil {
		d.Logf = func(string, ...any) {}
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("needs a Debian host: %w", err)
		}
	}
	id, ver, err := osRelease("/etc/os-release")
	if err != nil {
		return nil, err
	}
	if id != "debian" {
		return nil, fmt.Errorf("needs a Debian host for Debian's packages (this is %q)", id)
	}
	if d.CacheDir == "" {
		root := os.Getenv("MESHLET_CACHE") // as the install scripts
		if root == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("cache directory: %w", err)
			}
			root = filepath.Join(home, ".cache", "meshlet")
		}
		d.CacheDir = filepath.Join(root, "image")
	}
	dir := filepath.Join(d.CacheDir, "debian-"+ver)
	var archs []string
	for _, p := range plats {
		archs = append(archs, p.DebArch)
	}
	// Package lists of their own for each set of architectures: apt-get
	// update for one set rewrites the lists without the others'.
	apt := aptState{dir: filepath.Join(dir, "apt-"+strings.Join(archs, "-")), archs: archs}
	if err := apt.refresh(ctx, d.MaxAge, d.Logf); err != nil {
		return nil, err
	}
	var want []string // pkg:arch
	for _, p := range plats {
		for _, name := range DebianPackages {
			want = append(want, name+":"+p.DebArch)
		}
	}
	want = append(want, DebianAllPackages...)
	versions, err := apt.candidates(ctx, want)
	if err != nil {
		return nil, err
	}
	debs, err := apt.download(ctx, filepath.Join(dir, "debs"), versions, d.Logf)
	if err != nil {
		return nil, err
	}
	out := map[string]*Userspace{}
	for _, p := range plats {
		var set []debFile
		for _, f := range debs {
			if f.Arch == p.DebArch || f.Arch == "all" {
				set = append(set, f)
			}
		}
		u, err := unpack(ctx, filepath.Join(dir, "root"), p, set)
		if err != nil {
			return nil, err
		}
		if u.Files, err = selectFiles(u.Root, p, set); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out[p.Arch] = u
	}
	return out, nil
}

// osRelease returns ID and VERSION_ID.
func osRelease(file string) (id, version string, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("which distribution: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			version = v
		}
	}
	if id == "" || version == "" {
		return "", "", fmt.Errorf("%s: no ID or VERSION_ID", file)
	}
	return id, version, nil
}

// aptState is apt's state (package lists, download cache) kept apart from
// the host's: the host's sources and keys are used, but its lists, its
// dpkg architectures and its installed packages are neither read nor
// changed, so arm64 packages can be fetched on an amd64 host without
// dpkg --add-architecture.
type aptState struct {
	dir   string
	archs []string
}

func (a aptState) opts() []string {
	o := []string{
		"-o", "Dir::State=" + filepath.Join(a.dir, "state"),
		"-o", "Dir::State::status=" + filepath.Join(a.dir, "state", "status"),
		"-o", "Dir::Cache=" + filepath.Join(a.dir, "cache"),
		// apt drops to _apt to download, which cannot enter a cache in
		// root's home: downloads are checked against the signed lists
		// either way.
		"-o", "APT::Sandbox::User=root",
	}
	// Set here, the architectures replace the host's dpkg list.
	for _, arch := range a.archs {
		o = append(o, "-o", "APT::Architectures::="+arch)
	}
	return o
}

func (a aptState) run(ctx context.Context, dir, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tool, append(a.opts(), args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// refresh runs apt-get update when the lists are missing or older than
// maxAge. A failed refresh with lists already there is a warning: a build
// offline uses the package versions it last saw.
func (a aptState) refresh(ctx context.Context, maxAge time.Duration, logf func(string, ...any)) error {
	for _, d := range []string{"state/lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return fmt.Errorf("apt state: %w", err)
		}
	}
	status := filepath.Join(a.dir, "state", "status")
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		return fmt.Errorf("apt state: %w", err)
	}
	stamp := filepath.Join(a.dir, "updated")
	fi, err := os.Stat(stamp)
	if err == nil && time.Since(fi.ModTime()) < maxAge {
		return nil
	}
	logf("apt-get update (%s) into %s", strings.Join(a.archs, ", "), a.dir)
	if _, uerr := a.run(ctx, a.dir, "apt-get", "-qq", "update"); uerr != nil {
		if err == nil {
			logf("WARNING: keeping package lists from %s: %v", fi.ModTime().Format(time.RFC3339), uerr)
			return nil
		}
		return uerr
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// debFile is one downloaded package.
type debFile struct {
	Name, Version, Arch string
	Path                string
}

// candidates returns the version apt would install of each pkg[:arch].
func (a aptState) candidates(ctx context.Context, pkgs []string) ([]debFile, error) {
	out, err := a.run(ctx, a.dir, "apt-cache", append([]string{"show", "--no-all-versions"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	var res []debFile
	var cur debFile
	flush := func() {
		if cur.Name != "" {
			res = append(res, cur)
		}
		cur = debFile{}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			cur.Name = v
		case "Version":
			cur.Version = v
		case "Architecture":
			cur.Arch = v
		}
	}
	flush()
	if len(res) != len(pkgs) {
		return nil, fmt.Errorf("apt-cache show %s: %d records for %d packages", strings.Join(pkgs, " "), len(res), len(pkgs))
	}
	return res, nil
}

// download fetches the packages not yet in dir; names are apt's
// (<name>_<version>_<arch>.deb, the epoch's colon as %3a), so a version
// is downloaded once.
func (a aptState) download(ctx context.Context, dir string, pkgs []debFile, logf func(string, ...any)) ([]debFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	var missing []string
	for i := range pkgs {
		p := &pkgs[i]
		p.Path = filepath.Join(dir, fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), p.Arch))
		if _, err := os.Stat(p.Path); err != nil {
			q := p.Name
			if p.Arch != "all" {
				q += ":" + p.Arch
			}
			missing = append(missing, q+"="+p.Version)
		}
	}
	if len(missing) == 0 {
		return pkgs, nil
	}
	logf("apt-get download %s", strings.Join(missing, " "))
	// Into a directory of its own, then renamed: a build that stops half
	// way leaves no partial .deb under its final name.
	tmp, err := os.MkdirTemp(dir, ".download-")
	if err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := a.run(ctx, tmp, "apt-get", append([]string{"-qq", "download"}, missing...)...); err != nil {
		return nil, err
	}
	for _, p := range pkgs {
		if _, err := os.Stat(p.Path); err == nil {
			continue
		}
		if err := os.Rename(filepath.Join(tmp, filepath.Base(p.Path)), p.Path); err != nil {
			return nil, fmt.Errorf("apt-get download %s=%s: %w", p.Name, p.Version, err)
		}
	}
	return pkgs, nil
}

// unpack extracts the packages of one platform with dpkg-deb -x into
// dir/<arch>-<key>, once per set of versions.
func unpack(ctx context.Context, dir string, p Platform, debs []debFile) (*Userspace, error) {
	u := &Userspace{}
	for _, f := range debs {
		u.Packages = append(u.Packages, f.Name+"="+f.Version)
	}
	slices.Sort(u.Packages)
	sum := sha256.Sum256([]byte(strings.Join(u.Packages, "\n")))
	u.Root = filepath.Join(dir, p.DebArch+"-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(u.Root); err == nil {
		return u, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".unpack-")
	if err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range debs {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", f.Path, tmp).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("dpkg-deb -x %s: %w: %s", f.Path, err, out)
		}
	}
	// dpkg-deb gives the root the package's mode; the cache needs to walk it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	if err := os.Rename(tmp, u.Root); err != nil {
		// A build running alongside may have put the same set there first.
		if _, serr := os.Stat(u.Root); serr != nil {
			return nil, fmt.Errorf("unpack: %w", err)
		}
	}
	return u, nil
}

// selectFiles picks the layer's files below root: IptablesCommands, every
// xtables extension, /etc/protocols and the packages' copyright files, then
// whatever those need: symlink targets (each symlink on the way is kept as
// one) and, for ELF files, the program interpreter and the DT_NEEDED
// libraries, recursively. A library not found is an error, not an image
// that fails at run time.
func selectFiles(root string, p Platform, debs []debFile) ([]string, error) {
	queue := slices.Clone(IptablesCommands)
	ext, err := filepath.Glob(filepath.Join(root, "usr/lib", p.Triplet, "xtables", "*.so"))
	if err != nil {
		return nil, err
	}
	if len(ext) == 0 {
		return nil, fmt.Errorf("no xtables extensions in %s", filepath.Join(root, "usr/lib", p.Triplet, "xtables"))
	}
	for _, e := range ext {
		rel, _ := filepath.Rel(root, e)
		queue = append(queue, filepath.ToSlash(rel))
	}
	queue = append(queue, "etc/protocols")
	for _, f := range debs {
		c := path.Join("usr/share/doc", f.Name, "copyright")
		if _, err := os.Stat(filepath.Join(root, c)); err == nil {
			queue = append(queue, c)
		}
	}
	libDirs := []string{"lib/" + p.Triplet, "usr/lib/" + p.Triplet, "lib", "usr/lib"}
	seen := map[string]bool{}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		links, real, err := resolve(root, name)
		if err != nil {
			return nil, err
		}
		for _, l := range links {
			seen[l] = true
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		deps, err := elfDeps(filepath.Join(root, real))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", real, err)
		}
		for _, dep := range deps {
			if strings.HasPrefix(dep, "/") { // the interpreter
				queue = append(queue, strings.TrimPrefix(dep, "/"))
				continue
			}
			found := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(root, d, dep)); err == nil {
					found = path.Join(d, dep)
					break
				}
			}
			if found == "" {
				return nil, fmt.Errorf("%s needs %s, which none of %s (%s) holds", real, dep, strings.Join(libDirs, ", "), strings.Join(DebianPackages, " "))
			}
			queue = append(queue, found)
		}
	}
	files := make([]string, 0, len(seen))
	for f := range seen {
		files = append(files, f)
	}
	slices.Sort(files)
	return files, nil
}

// resolve follows name below root, component by component, as the kernel
// would inside the image: it returns the symlinks passed (paths below
// root) and the regular file reached.
func resolve(root, name string) (links []string, real string, err error) {
	cur := "" // resolved so far, relative to root
	rest := strings.Split(strings.Trim(name, "/"), "/")
	for hops := 0; len(rest) > 0; {
		next := path.Join(cur, rest[0])
		rest = rest[1:]
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return nil, "", fmt.Errorf("%s: too many symlinks", name)
		}
		links = append(links, next)
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return nil, "", err
		}
		if !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(next), target)
		}
		// The target's components are resolved in turn; ".." cannot
		// leave root because the join is rooted.
		rest = append(strings.Split(strings.Trim(path.Clean("/"+target), "/"), "/"), rest...)
		cur = ""
	}
	fi, err := os.Stat(filepath.Join(root, cur))
	if err != nil {
		return nil, "", err
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("%s: resolves to %s, not a regular file", name, cur)
	}
	return links, cur, nil
}

// elfDeps returns an ELF file's interpreter (absolute) and DT_NEEDED
// libraries; nothing for other files.
func elfDeps(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := f.ReadAt(magic, 0); err != nil || string(magic) != elf.ELFMAG {
		return nil, nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("read ELF: %w", err)
	}
	var deps []string
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("read interpreter: %w", err)
			}
			deps = append(deps, strings.TrimRight(string(b), "\x00"))
		}
	}
	libs, err := ef.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("read DT_NEEDED: %w", err)
	}
	return append(deps, libs...), nil
}

// Tree is the layer's content: the selected files, with their package
// modes reduced to 0755 or 0644 (nothing in them is setuid).
func (u *Userspace) Tree() (Tree, error) {
	t := Tree{}
	for _, f := range u.Files {
		full := filepath.Join(u.Root, f)
		fi, err := os.Lstat(full)
		if err != nil {
			return nil, err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return nil, err
			}
			t.Symlink(f, target)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(full)
			if err != nil {
				return nil, err
			}
			mode := int64(0o644)
			if fi.Mode()&0o111 != 0 {
				mode = 0o755
			}
			t.File(f, mode, b)
		default:
			return nil, fmt.Errorf("%s: not a file or symlink", full)
		}
	}
	return t, nil
}
