package unixsock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// mkdirAll is os.MkdirAll that also returns how to undo it: undo removes
// the directories this call created, deepest first, so that a failed
// start leaves nothing behind. It never removes a directory that existed
// before, nor one that is no longer empty.
func mkdirAll(dir string, perm fs.FileMode) (undo func(), err error) {
	var missing []string // deepest first
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			break
		}
		missing = append(missing, p)
	}
	undo = func() {
		for _, p := range missing {
			_ = os.Remove(p) // fails, harmlessly, on what was never created or is in use
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		undo() // MkdirAll may have created some before failing
		return nil, err
	}
	return undo, nil
}
