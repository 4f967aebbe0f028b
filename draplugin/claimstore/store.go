package claimstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/apis/v1alpha1"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// FileName is the prepared-claims file in the state directory.
const FileName = "claims.json"

// Version is the claims file's format version.
const Version = 1

// ErrCorrupt means the claims file exists but cannot be read.
var ErrCorrupt = errors.New("prepared-claims file is corrupt")

// ErrVersion means the claims file is of another format version: a
// meshlet of another release wrote it. It is neither read nor replaced, so
// that a rollback or an overlapping update never destroys the other
// release's claims.
var ErrVersion = errors.New("prepared-claims file of another meshlet version")

// Claim is one prepared mesh ResourceClaim: which pods it is for and the
// settings it gives them. It is the claim's fact, kept by claim UID; the
// pod's enrollment record stays the core's.
type Claim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the UIDs of the pods the claim is reserved for.
	Pods []string `json:"pods"`
	// Settings are the claim's mesh settings, merged from its device
	// class's and its own opaque configuration (the claim's win).
	Settings v1alpha1.MeshConfig `json:"settings"`
	// Devices are the claim's allocated mesh devices, for its status.
	Devices []AllocatedDevice `json:"devices"`
}

// AllocatedDevice is one allocation result of the driver in a claim.
type AllocatedDevice struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
}

// fileContent is the file's content.
type fileContent struct {
	Version int     `json:"version"`
	Claims  []Claim `json:"claims"`
}

// Store holds the prepared claims, persisted in the state directory
// before Prepare returns. Two meshlets share the file during a rolling
// update (the kubelet may prepare a claim in one and start the pod
// through the other's runtime hook), so every read first checks whether
// the other replaced it; writes are serialised across processes by the
// kubelet plugin helper's lock.
type Store struct {
	dir string

	// writeMu serialises Put and Remove within the process and is held
	// across the write to disk; mu guards the claims in memory and is
	// never held across a write, so the runtime hook's reads never wait
	// for a Prepare's fsync.
	writeMu sync.Mutex
	mu      sync.Mutex
	claims  map[string]*Claim   // by claim UID
	byPod   map[string][]*Claim // by pod UID, in claim UID order
	byName  map[string]*Claim   // by namespace/name
	// cur is the file as last read or written, kept open so that its
	// inode cannot be reused: the path names another file exactly when
	// the file was replaced (writers rename a new one over it).
	cur     *os.File
	curInfo fs.FileInfo
}

// Open loads the claims file in dir; a missing file is an empty
// store. A corrupt or unknown-version file is an error wrapping
// ErrCorrupt: the caller decides (meshlet sets it aside and starts
// empty, loudly).
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir}
	s.set(nil)
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the file last read. The store must not be used after.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil
	}
	err := s.cur.Close()
	s.cur, s.curInfo = nil, nil
	return err
}

// SetAside keeps a corrupt claims file under a dated name, like the
// checkpoint's. It links rather than renames, so the claims file never
// disappears for a reader: the caller replaces it next.
func SetAside(dir string, now time.Time) (string, error) {
	dst := filepath.Join(dir, fmt.Sprintf("%s.corrupt-%s", FileName, now.UTC().Format("20060102T150405.000000000Z")))
	if err := os.Link(filepath.Join(dir, FileName), dst); err != nil {
		return "", fmt.Errorf("set aside %s: %w", FileName, err)
	}
	return dst, nil
}

func (s *Store) path() string { return filepath.Join(s.dir, FileName) }

// reload reads the file if it was replaced since it was last read: one
// stat. s.mu is held (or s is not shared yet). On error the claims last
// read stay.
func (s *Store) reload() error {
	fi, err := os.Stat(s.path())
	if errors.Is(err, fs.ErrNotExist) {
		if s.cur != nil {
			s.closeCur()
			s.set(nil) // removed by hand: nothing is prepared
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.path(), err)
	}
	if s.cur != nil && os.SameFile(fi, s.curInfo) {
		return nil
	}
	f, err := os.Open(s.path())
	if err != nil {
		return fmt.Errorf("%s: %w", s.path(), err)
	}
	claims, err := read(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", s.path(), err)
	}
	s.closeCur()
	s.cur = f
	s.curInfo, _ = f.Stat()
	s.set(claims)
	return nil
}

// read reads and parses an open claims file.
func read(f *os.File) ([]Claim, error) {
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return parse(b)
}

func (s *Store) closeCur() {
	if s.cur != nil {
		s.cur.Close()
	}
	s.cur, s.curInfo = nil, nil
}

// Reset keeps a corrupt claims file under a dated name and replaces
// it with an empty one, atomically: a reader (the other meshlet of an
// update) never finds the file missing.
func Reset(dir string, now time.Time) (string, error) {
	dst, err := SetAside(dir, now)
	if err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(fileContent{Version: Version, Claims: []Claim{}}, "", "  ")
	if err != nil {
		return dst, err
	}
	return dst, atomicfile.Write(dir, FileName, append(b, '\n'), 0o600)
}

// reloadForWrite is reload for Put and Remove: a file that became corrupt
// after start-up is set aside, loudly, and replaced from the claims last
// read, so one bad write never stops the node's Prepare and Unprepare.
func (s *Store) reloadForWrite() error {
	err := s.reload()
	if !errors.Is(err, ErrCorrupt) {
		return err
	}
	dst, aerr := SetAside(s.dir, time.Now())
	if aerr != nil {
		return fmt.Errorf("%w (and setting it aside failed: %w)", err, aerr)
	}
	klog.Background().Error(err, "Prepared-claims file set aside; rewriting it from the claims this meshlet last read", "setAside", dst)
	return nil
}

// parse decodes the file strictly.
func parse(b []byte) ([]Claim, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f fileContent
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	// Not dec.More(): it is false before a stray '}' or ']', which would
	// let `{...}}` through.
	if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
		return nil, fmt.Errorf("%w: trailing data", ErrCorrupt)
	}
	if f.Version == 0 {
		return nil, fmt.Errorf("%w: no version", ErrCorrupt)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("%w: version %d, this meshlet reads %d", ErrVersion, f.Version, Version)
	}
	seen := map[string]bool{}
	for i, c := range f.Claims {
		if c.UID == "" || seen[c.UID] {
			return nil, fmt.Errorf("%w: claims[%d]: missing or repeated uid %q", ErrCorrupt, i, c.UID)
		}
		seen[c.UID] = true
	}
	return f.Claims, nil
}

// set replaces the in-memory claims and rebuilds the pod index.
func (s *Store) set(claims []Claim) {
	s.claims = make(map[string]*Claim, len(claims))
	s.byPod = map[string][]*Claim{}
	s.byName = make(map[string]*Claim, len(claims))
	slices.SortFunc(claims, func(a, b Claim) int { return strings.Compare(a.UID, b.UID) })
	for i := range claims {
		c := &claims[i]
		s.claims[c.UID] = c
		s.byName[c.Namespace+"/"+c.Name] = c
		for _, pod := range c.Pods {
			s.byPod[pod] = append(s.byPod[pod], c)
		}
	}
}

// save writes the given claims and, once they are on disk, makes them the
// store's. s.writeMu is held, s.mu is not.
func (s *Store) save(claims []Claim) error {
	slices.SortFunc(claims, func(a, b Claim) int { return strings.Compare(a.UID, b.UID) })
	if claims == nil {
		claims = []Claim{}
	}
	b, err := json.MarshalIndent(fileContent{Version: Version, Claims: claims}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.dir, FileName, append(b, '\n'), 0o600); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set(claims)
	s.closeCur()
	if f, err := os.Open(s.path()); err == nil {
		// Writers are serialised (the kubelet plugin's lock), so this is
		// the file just written.
		s.cur = f
		s.curInfo, _ = f.Stat()
	} // else: read again next time
	return nil
}

// all returns a copy of the claims. s.mu is held.
func (s *Store) all() []Claim {
	out := make([]Claim, 0, len(s.claims))
	for _, c := range s.claims {
		out = append(out, *c)
	}
	return out
}

// current is a copy of the claims as the file has them now, for a writer.
func (s *Store) current() ([]Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reloadForWrite(); err != nil {
		return nil, err
	}
	return s.all(), nil
}

// Put stores claims (replacing any with the same UID) and returns once
// they are on disk. On error nothing changed.
func (s *Store) Put(claims ...Claim) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	next, err := s.current()
	if err != nil {
		return err
	}
	for _, c := range claims {
		i := slices.IndexFunc(next, func(o Claim) bool { return o.UID == c.UID })
		if i >= 0 {
			next[i] = c
		} else {
			next = append(next, c)
		}
	}
	return s.save(next)
}

// Remove drops claims by UID; unknown UIDs are fine. It returns the claims
// it removed, once the file no longer has them.
func (s *Store) Remove(uids ...string) ([]Claim, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	current, err := s.current()
	if err != nil {
		return nil, err
	}
	var removed []Claim
	next := slices.DeleteFunc(current, func(c Claim) bool {
		if slices.Contains(uids, c.UID) {
			removed = append(removed, c)
			return true
		}
		return false
	})
	if len(removed) == 0 {
		return nil, nil
	}
	return removed, s.save(next)
}

// ForPod returns the claims prepared for a pod, in claim UID order.
func (s *Store) ForPod(podUID string) []Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	out := make([]Claim, 0, len(s.byPod[podUID]))
	for _, c := range s.byPod[podUID] {
		out = append(out, *c)
	}
	return out
}

// Of returns the prepared claims of a pod: those prepared for it, and
// those of its ResourceClaims (info, from the API server) prepared for
// another pod. A claim shared by several pods is prepared once, for the
// pods reserved when the kubelet first prepared it; a pod that joins it
// later is found by the claim's name.
func (s *Store) Of(pod *enroll.Pod, info enroll.PodInfo) []Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	var out []Claim
	for _, c := range s.byPod[pod.UID] {
		out = append(out, *c)
	}
	for _, name := range info.ResourceClaims {
		c, ok := s.byName[pod.Namespace+"/"+name]
		if ok && !slices.ContainsFunc(out, func(o Claim) bool { return o.UID == c.UID }) {
			out = append(out, *c)
		}
	}
	slices.SortFunc(out, func(a, b Claim) int { return strings.Compare(a.UID, b.UID) })
	return out
}

// Get returns a prepared claim by UID.
func (s *Store) Get(uid string) (Claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	c, ok := s.claims[uid]
	if !ok {
		return Claim{}, false
	}
	return *c, true
}

// Claimed reports whether a mesh claim was prepared for the pod itself: it
// was reserved for the pod when the kubelet prepared it, so Prepare checked
// the pod (unlike a claim Of finds by name only).
func (s *Store) Claimed(podUID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	return len(s.byPod[podUID]) > 0
}

// Len is the number of prepared claims.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	return len(s.claims)
}

// refresh picks up another process's write for a reader. A file that
// became unreadable keeps the last good claims: the writer that broke it
// fails its own call, and readers must not drop prepared pods' settings.
func (s *Store) refresh() { _ = s.reload() }

// PodSettings gives the settings of the pod's mesh claims: the
// highest-precedence source of per-pod settings. With more than one
// claim, each setting comes from the first claim (by UID) that sets it.
func (s *Store) PodSettings(pod *enroll.Pod, info enroll.PodInfo) (enroll.SettingsOverride, []string) {
	var o enroll.SettingsOverride
	for _, c := range s.Of(pod, info) {
		co := c.Settings.Override()
		if o.DNSCapture == nil {
			o.DNSCapture = co.DNSCapture
		}
		if o.BypassInbound == nil {
			o.BypassInbound = co.BypassInbound
		}
	}
	return o, nil
}

var _ enroll.SettingsSource = (*Store)(nil)
