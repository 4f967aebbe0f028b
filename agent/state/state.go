// Package state is meshlet's checkpoint: what the agent has enrolled on
// this node, so that a restarted agent can adopt running pods instead of
// rewriting their rules. The file is versioned, written to a temporary file
// and renamed (never half-written), and a file that cannot be read as the
// current version is refused loudly rather than half-trusted.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Version is the checkpoint format version this code reads and writes.
const Version = 1

// FileName is the checkpoint's name inside the state directory.
const FileName = "checkpoint.json"

// Pod is one enrolled pod as it was enrolled.
type Pod struct {
	UID            string       `json:"uid"`
	Name           string       `json:"name"`
	Namespace      string       `json:"namespace"`
	ServiceAccount string       `json:"serviceAccount"`
	NetnsInode     uint64       `json:"netnsInode"`
	IPs            []netip.Addr `json:"ips"`
	DNSCapture     bool         `json:"dnsCapture"`
	BypassInbound  bool         `json:"bypassInbound"`
	IPv6           bool         `json:"ipv6"`
}

// Checkpoint is the file's content.
type Checkpoint struct {
	Version int   `json:"version"`
	Pods    []Pod `json:"pods"`
}

// ErrCorrupt marks a checkpoint that exists but cannot be used.
var ErrCorrupt = errors.New("corrupt checkpoint")

// Load reads the checkpoint in dir. A missing file is an empty checkpoint;
// an unreadable, unparsable or other-version file is ErrCorrupt, with the
// path and the reason.
func Load(dir string) (Checkpoint, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{Version: Version}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return Checkpoint{}, fmt.Errorf("%w %s: %v", ErrCorrupt, path, err)
	}
	if cp.Version != Version {
		return Checkpoint{}, fmt.Errorf("%w %s: version %d, this meshlet reads version %d", ErrCorrupt, path, cp.Version, Version)
	}
	for i, p := range cp.Pods {
		if p.UID == "" || p.NetnsInode == 0 {
			return Checkpoint{}, fmt.Errorf("%w %s: pod %d has no uid or netns inode", ErrCorrupt, path, i)
		}
	}
	return cp, nil
}

// Save writes the checkpoint atomically: a temporary file in dir, synced,
// then renamed over the old one.
func Save(dir string, cp Checkpoint) error {
	cp.Version = Version
	slices.SortFunc(cp.Pods, ByUID)
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, FileName+".tmp-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		return fmt.Errorf("install checkpoint: %w", err)
	}
	return nil
}

// ByUID orders pods by UID: the file's order, stable across writes.
func ByUID(a, b Pod) int { return strings.Compare(a.UID, b.UID) }

// SetAside renames a corrupt checkpoint so the agent can start fresh and an
// operator can still look at it.
func SetAside(dir string) (string, error) {
	dst := filepath.Join(dir, FileName+".corrupt")
	return dst, os.Rename(filepath.Join(dir, FileName), dst)
}
