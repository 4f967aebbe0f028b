package install

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// tempPrefix begins our temporary files: with the ".tmp-…" ending that
// atomicfile adds, the runtimes (which load .conf, .conflist and .json)
// ignore them, and a person can tell whose they are.
const tempPrefix = ".meshlet-"

// staleTempAge: a temporary file of ours older than this was left by a
// process that died mid-write.
const staleTempAge = time.Minute

// errSourceChanged: the file a new content was derived from changed while
// it was being written; writing would undo that change.
var errSourceChanged = errors.New("changed while meshlet was writing; trying again")

// writeFunc is atomicfile.WriteWith; tests substitute it to fail.
type writeFunc func(dir, name string, r io.Reader, perm os.FileMode, opts atomicfile.Options) error

// writeConfig atomically writes data as dir/name with mode perm, unless
// src (what data was derived from) has changed by the time the new file
// is ready.
func (in *Installer) writeConfig(name string, data []byte, perm fs.FileMode, src *confFile) error {
	return writeDerived(in.write, in.cfg.ConfDir, name, data, perm, src)
}

// writeDerived atomically writes data as dir/name with mode perm, with
// write, unless src (what data was derived from) has changed by the time
// the new file is ready.
func writeDerived(write writeFunc, dir, name string, data []byte, perm fs.FileMode, src *confFile) error {
	opts := atomicfile.Options{TempPrefix: tempPrefix}
	if src != nil {
		opts.BeforeRename = func() error {
			cur, err := os.ReadFile(src.path)
			if err != nil || !bytes.Equal(cur, src.data) {
				return fmt.Errorf("%s %w", src.name, errSourceChanged)
			}
			return nil
		}
	}
	if err := write(dir, name, bytes.NewReader(data), perm.Perm(), opts); err != nil {
		return fmt.Errorf("CNI config %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// removeFile removes path and makes that durable; absent is fine.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// binaryPath is where the runtime looks for the plugin.
func (in *Installer) binaryPath() string { return filepath.Join(in.cfg.BinDir, PluginType) }

// fileKey identifies a file's version well enough to skip re-hashing it.
type fileKey struct {
	size  int64
	mtime time.Time
	mode  fs.FileMode
}

func keyOf(fi fs.FileInfo) fileKey { return fileKey{fi.Size(), fi.ModTime(), fi.Mode()} }

// binaryCache remembers digests so that a pass does not hash megabytes
// when nothing changed.
type binaryCache struct {
	srcKey fileKey
	srcSum [sha256.Size]byte
	dst    fs.FileInfo // the installed binary as last verified or written
}

// ensureBinary puts PluginBinary at BinDir/meshlet-cni (mode 0755,
// atomically) unless an identical file is there, so that re-asserting
// causes no churn and a running plugin is never overwritten in place.
// full ignores the cache (the periodic resync).
func (in *Installer) ensureBinary(full bool) (wrote bool, err error) {
	dst := in.binaryPath()
	if in.cfg.PluginBinary == "" {
		fi, err := os.Stat(dst)
		if err != nil {
			return false, fmt.Errorf("plugin binary %s (not copied: no --cni-plugin-binary): %w", dst, err)
		}
		if !fi.Mode().IsRegular() {
			return false, fmt.Errorf("plugin binary %s is not a regular file", dst)
		}
		return false, nil
	}
	if filepath.Clean(in.cfg.PluginBinary) == dst {
		return false, nil // already where the runtime looks
	}
	same, err := in.binaryInstalled(dst, full)
	if err != nil || same {
		return false, err
	}
	src, err := os.Open(in.cfg.PluginBinary)
	if err != nil {
		return false, fmt.Errorf("--cni-plugin-binary: %w", err)
	}
	defer src.Close()
	if err := in.write(in.cfg.BinDir, PluginType, src, 0o755, atomicfile.Options{TempPrefix: tempPrefix}); err != nil {
		return false, fmt.Errorf("plugin binary %s: %w", dst, err)
	}
	if fi, err := os.Lstat(dst); err == nil {
		in.bin.dst = fi
	}
	return true, nil
}

// binaryInstalled: dst is a regular 0755 file with PluginBinary's content.
func (in *Installer) binaryInstalled(dst string, full bool) (bool, error) {
	sfi, err := os.Stat(in.cfg.PluginBinary)
	if err != nil {
		return false, fmt.Errorf("--cni-plugin-binary: %w", err)
	}
	if !sfi.Mode().IsRegular() {
		return false, fmt.Errorf("--cni-plugin-binary %s is not a regular file", in.cfg.PluginBinary)
	}
	dfi, err := os.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("plugin binary %s: %w", dst, err)
	}
	if !dfi.Mode().IsRegular() || dfi.Mode().Perm() != 0o755 || dfi.Size() != sfi.Size() {
		return false, nil
	}
	if full || keyOf(sfi) != in.bin.srcKey {
		sum, err := hashFile(in.cfg.PluginBinary)
		if err != nil {
			return false, fmt.Errorf("--cni-plugin-binary: %w", err)
		}
		in.bin.srcKey, in.bin.srcSum = keyOf(sfi), sum
		in.bin.dst = nil
	}
	// The same inode, size, mtime and mode as what we verified or wrote:
	// replacing or rewriting it would have changed one of them.
	if prev := in.bin.dst; !full && prev != nil && os.SameFile(prev, dfi) && keyOf(prev) == keyOf(dfi) {
		return true, nil
	}
	sum, err := hashFile(dst)
	if err != nil {
		return false, fmt.Errorf("plugin binary %s: %w", dst, err)
	}
	if sum != in.bin.srcSum {
		return false, nil
	}
	in.bin.dst = dfi
	return true, nil
}

func hashFile(path string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// removeStaleTemps removes temporary files of ours in dir that a process
// that died mid-write left; recent ones may belong to a live writer.
func removeStaleTemps(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tempPrefix) || !strings.Contains(e.Name(), ".tmp-") {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > staleTempAge {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
