// Package atomicfile writes a file so that readers see the old content or
// the new, never a part: a temporary file in the same directory, synced,
// then renamed over the old one, then the directory synced so that the
// rename itself survives a crash.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Write replaces dir/name with data, creating dir (0700) if needed. On any
// error the old file is untouched and no temporary file is left behind.
func Write(dir, name string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	return WriteWith(dir, name, bytes.NewReader(data), perm, Options{})
}

// Options adjust WriteWith.
type Options struct {
	// TempPrefix goes before name in the temporary file's name, which ends
	// in ".tmp-" and a random suffix. A directory that other programs scan
	// (a CNI config directory, say) wants a prefix that tells them and
	// people where the file comes from, such as ".meshlet-": the
	// ".tmp-…" ending already keeps it out of extension-based scans.
	TempPrefix string
	// BeforeRename, if set, runs once the new content is synced, just
	// before it replaces the old file. An error from it abandons the write:
	// the old file stays and the temporary file is removed. A caller that
	// derived the content from a file another program also writes uses it
	// to check that file has not changed meanwhile, which narrows the
	// window in which that program's update would be overwritten.
	BeforeRename func() error
}

// WriteWith replaces dir/name with everything r yields, with mode perm
// (exactly: the umask does not apply). dir must exist: a caller writing
// into another program's directory must not create it with the wrong
// owner or mode. On any error, including one from r, the old file is
// untouched and no temporary file is left behind.
func WriteWith(dir, name string, r io.Reader, perm os.FileMode, opts Options) error {
	tmp, err := os.CreateTemp(dir, opts.TempPrefix+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if opts.BeforeRename != nil {
		if err := opts.BeforeRename(); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("install %s: %w", name, err)
	}
	return nil
}

// SyncDir makes the directory's entries durable: after a rename or a
// remove, so that a crash cannot bring the old name back.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	// Some systems cannot sync a directory (EINVAL, ENOTSUP): there the
	// rename is as durable as they make it, which is not an error.
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
