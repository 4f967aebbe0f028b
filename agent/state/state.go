// Package state is meshlet's checkpoint: the records of the pods the agent
// has enrolled on this node, so that a restarted agent can adopt running
// pods instead of rewriting their rules. The file holds the core's own
// records (enroll.Record) as they are. It is versioned, written to a
// temporary file and renamed (never half-written), and a file that cannot
// be read as the current version is set aside loudly rather than
// half-trusted.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// Version is the checkpoint format version this code writes. It reads
// version 2 too (no boot ID, records without sandbox IDs or cookies: see
// Checkpoint.BootID). Version 1 (flat per-pod options) is not read: a
// meshlet upgraded from it rewrites every running pod's rules once.
const Version = 3

// oldestVersion is the oldest version this code reads.
const oldestVersion = 2

// FileName is the checkpoint's name inside the state directory.
const FileName = "checkpoint.json"

// Checkpoint is the file's content.
type Checkpoint struct {
	Version int `json:"version"`
	// BootID is the boot the records were written in (BootID). Records of
	// another boot name namespaces that died with it, whose inodes and
	// cookies the kernel hands out again. Empty: not known (version 2).
	BootID string          `json:"bootID,omitempty"`
	Pods   []enroll.Record `json:"pods"`
}

// bootIDFile holds the kernel's random ID of the current boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// BootID returns the ID the kernel drew for this boot.
func BootID() (string, error) {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return "", fmt.Errorf("boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("boot ID: %s is empty", bootIDFile)
	}
	return id, nil
}

// ErrCorrupt marks a checkpoint that exists but cannot be used.
var ErrCorrupt = errors.New("corrupt checkpoint")

// ErrOtherVersion marks a well-formed checkpoint of another format version
// (written by an older or newer meshlet): not corrupt, just not readable
// here.
var ErrOtherVersion = errors.New("checkpoint of another version")

// Load reads the checkpoint in dir. A missing file is an empty checkpoint;
// another format version is ErrOtherVersion; an unparsable or inconsistent
// file is ErrCorrupt; each with the path and the reason.
func Load(dir string) (Checkpoint, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{Version: Version}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	cp, err := parse(b)
	if errors.Is(err, ErrOtherVersion) {
		return Checkpoint{}, fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w %s: %w", ErrCorrupt, path, err)
	}
	return cp, nil
}

// parse decodes and checks a checkpoint: the current version, and every
// pod with a UID (once), a netns inode and at least one address.
func parse(b []byte) (Checkpoint, error) {
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return Checkpoint{}, err
	}
	if cp.Version < oldestVersion || cp.Version > Version {
		return Checkpoint{}, fmt.Errorf("%w: version %d, this meshlet reads versions %d to %d", ErrOtherVersion, cp.Version, oldestVersion, Version)
	}
	if cp.Version == Version && cp.BootID == "" {
		return Checkpoint{}, errors.New("bootID: missing")
	}
	seen := make(map[string]bool, len(cp.Pods))
	for i, p := range cp.Pods {
		switch {
		case p.UID == "":
			return Checkpoint{}, fmt.Errorf("pods[%d]: no uid", i)
		case seen[p.UID]:
			return Checkpoint{}, fmt.Errorf("pods[%d]: uid %s appears twice", i, p.UID)
		case p.NetnsInode == 0:
			return Checkpoint{}, fmt.Errorf("pods[%d] (uid %s): no netnsInode", i, p.UID)
		case len(p.IPs) == 0:
			return Checkpoint{}, fmt.Errorf("pods[%d] (uid %s): no ips", i, p.UID)
		}
		for j, ip := range p.IPs {
			if !ip.IsValid() {
				return Checkpoint{}, fmt.Errorf("pods[%d] (uid %s): ips[%d] is empty", i, p.UID, j)
			}
		}
		seen[p.UID] = true
	}
	return cp, nil
}

// Save writes the records, of the boot bootID, atomically, sorted by UID:
// a temporary file in dir, synced, then renamed over the old one.
func Save(dir, bootID string, records []enroll.Record) error {
	if bootID == "" {
		return errors.New("checkpoint: no boot ID")
	}
	cp := Checkpoint{Version: Version, BootID: bootID, Pods: slices.SortedFunc(slices.Values(records), byUID)}
	if cp.Pods == nil {
		cp.Pods = []enroll.Record{}
	}
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(dir, FileName, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

func byUID(a, b enroll.Record) int { return strings.Compare(a.UID, b.UID) }

// RemoveCutWrites removes the temporary files of checkpoint writes that
// never finished (the agent was killed between the write and the rename;
// the previous checkpoint stands) and returns their names. Only the agent
// that holds the node's lock may call it: another one's write in flight
// would look the same.
func RemoveCutWrites(dir string) ([]string, error) {
	cut, err := filepath.Glob(filepath.Join(dir, FileName+".tmp-*"))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, f := range cut {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cut, fmt.Errorf("remove unfinished checkpoint writes: %w", err)
	}
	return cut, nil
}

// SetAside renames a corrupt checkpoint so the agent can start fresh and an
// operator can still look at it. The new name carries the time (UTC), so
// one corrupt file never replaces another.
func SetAside(dir string, now time.Time) (string, error) {
	base := filepath.Join(dir, FileName+".corrupt-"+now.UTC().Format("20060102T150405Z"))
	for i := 0; ; i++ {
		dst := base
		if i > 0 {
			dst = fmt.Sprintf("%s-%d", base, i)
		}
		// A hard link fails if dst exists, where a rename would replace it.
		err := os.Link(filepath.Join(dir, FileName), dst)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("set aside checkpoint: %w", err)
		}
		if err := os.Remove(filepath.Join(dir, FileName)); err != nil {
			return dst, fmt.Errorf("set aside checkpoint: %w", err)
		}
		return dst, nil
	}
}
