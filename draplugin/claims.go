package draplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/apis/v1alpha1"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// ClaimsFileName is the prepared-claims file in the state directory.
const ClaimsFileName = "claims.json"

// ClaimsVersion is the claims file's format version.
const ClaimsVersion = 1

// ErrClaimsCorrupt means the claims file exists but cannot be read.
var ErrClaimsCorrupt = errors.New("prepared-claims file is corrupt")

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

// claimsFile is the file's content.
type claimsFile struct {
	Version int     `json:"version"`
	Claims  []Claim `json:"claims"`
}

// ClaimStore holds the prepared claims, persisted in the state directory
// before Prepare returns. Two meshlets share the file during a rolling
// update (the kubelet may prepare a claim in one and start the pod
// through the other's runtime hook), so every read first checks whether
// the other rewrote it; writes are serialised across processes by the
// kubelet plugin helper's lock.
type ClaimStore struct {
	dir string

	mu     sync.Mutex
	claims map[string]*Claim   // by claim UID
	byPod  map[string][]*Claim // by pod UID, in claim UID order
	stamp  fileStamp           // the file as last read or written
}

// fileStamp tells whether the file changed since it was read: a rename
// installs a new inode.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func stampOf(fi fs.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = uint64(sys.Ino)
	}
	return st
}

// OpenClaimStore loads the claims file in dir; a missing file is an empty
// store. A corrupt or unknown-version file is an error wrapping
// ErrClaimsCorrupt: the caller decides (meshlet sets it aside and starts
// empty, loudly).
func OpenClaimStore(dir string) (*ClaimStore, error) {
	s := &ClaimStore{dir: dir}
	s.set(nil)
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// SetAsideClaims renames a corrupt claims file, like the checkpoint's.
func SetAsideClaims(dir string, now time.Time) (string, error) {
	dst := filepath.Join(dir, fmt.Sprintf("%s.corrupt-%s", ClaimsFileName, now.UTC().Format("20060102T150405.000000000Z")))
	if err := os.Rename(filepath.Join(dir, ClaimsFileName), dst); err != nil {
		return "", fmt.Errorf("set aside %s: %w", ClaimsFileName, err)
	}
	return dst, nil
}

func (s *ClaimStore) path() string { return filepath.Join(s.dir, ClaimsFileName) }

// reload reads the file if it changed since it was last read. s.mu is
// held (or s is not shared yet).
func (s *ClaimStore) reload() error {
	fi, err := os.Stat(s.path())
	if errors.Is(err, fs.ErrNotExist) {
		if s.stamp != (fileStamp{}) {
			s.set(nil) // removed by hand: nothing is prepared
			s.stamp = fileStamp{}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.path(), err)
	}
	st := stampOf(fi)
	if st == s.stamp {
		return nil
	}
	b, err := os.ReadFile(s.path())
	if err != nil {
		return fmt.Errorf("%s: %w", s.path(), err)
	}
	claims, err := parseClaims(b)
	if err != nil {
		return fmt.Errorf("%s: %w", s.path(), err)
	}
	s.set(claims)
	s.stamp = st
	return nil
}

// parseClaims decodes the file strictly.
func parseClaims(b []byte) ([]Claim, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f claimsFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClaimsCorrupt, err)
	}
	// Not dec.More(): it is false before a stray '}' or ']', which would
	// let `{...}}` through.
	if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
		return nil, fmt.Errorf("%w: trailing data", ErrClaimsCorrupt)
	}
	if f.Version != ClaimsVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrClaimsCorrupt, f.Version, ClaimsVersion)
	}
	seen := map[string]bool{}
	for i, c := range f.Claims {
		if c.UID == "" || seen[c.UID] {
			return nil, fmt.Errorf("%w: claims[%d]: missing or repeated uid %q", ErrClaimsCorrupt, i, c.UID)
		}
		seen[c.UID] = true
	}
	return f.Claims, nil
}

// set replaces the in-memory claims and rebuilds the pod index.
func (s *ClaimStore) set(claims []Claim) {
	s.claims = make(map[string]*Claim, len(claims))
	s.byPod = map[string][]*Claim{}
	slices.SortFunc(claims, func(a, b Claim) int { return strings.Compare(a.UID, b.UID) })
	for i := range claims {
		c := &claims[i]
		s.claims[c.UID] = c
		for _, pod := range c.Pods {
			s.byPod[pod] = append(s.byPod[pod], c)
		}
	}
}

// save writes the given claims and, once they are on disk, makes them the
// store's. s.mu is held.
func (s *ClaimStore) save(claims []Claim) error {
	slices.SortFunc(claims, func(a, b Claim) int { return strings.Compare(a.UID, b.UID) })
	if claims == nil {
		claims = []Claim{}
	}
	b, err := json.MarshalIndent(claimsFile{Version: ClaimsVersion, Claims: claims}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.dir, ClaimsFileName, append(b, '\n'), 0o600); err != nil {
		return err
	}
	s.set(claims)
	if fi, err := os.Stat(s.path()); err == nil {
		s.stamp = stampOf(fi)
	} else {
		s.stamp = fileStamp{} // read it again next time
	}
	return nil
}

// all returns a copy of the claims. s.mu is held.
func (s *ClaimStore) all() []Claim {
	out := make([]Claim, 0, len(s.claims))
	for _, c := range s.claims {
		out = append(out, *c)
	}
	return out
}

// Put stores claims (replacing any with the same UID) and returns once
// they are on disk. On error nothing changed.
func (s *ClaimStore) Put(claims ...Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reload(); err != nil {
		return err
	}
	next := s.all()
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
func (s *ClaimStore) Remove(uids ...string) ([]Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reload(); err != nil {
		return nil, err
	}
	var removed []Claim
	next := slices.DeleteFunc(s.all(), func(c Claim) bool {
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
func (s *ClaimStore) ForPod(podUID string) []Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	out := make([]Claim, 0, len(s.byPod[podUID]))
	for _, c := range s.byPod[podUID] {
		out = append(out, *c)
	}
	return out
}

// Claimed reports whether a mesh claim was prepared for the pod.
func (s *ClaimStore) Claimed(podUID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	return len(s.byPod[podUID]) > 0
}

// Len is the number of prepared claims.
func (s *ClaimStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh()
	return len(s.claims)
}

// refresh picks up another process's write for a reader. A file that
// became unreadable keeps the last good claims: the writer that broke it
// fails its own call, and readers must not drop prepared pods' settings.
func (s *ClaimStore) refresh() { _ = s.reload() }

// PodSettings gives the settings of the pod's mesh claims: the
// highest-precedence source of per-pod settings. With more than one
// claim, each setting comes from the first claim (by UID) that sets it.
func (s *ClaimStore) PodSettings(pod *enroll.Pod, _ enroll.PodInfo) (enroll.SettingsOverride, []string) {
	var o enroll.SettingsOverride
	for _, c := range s.ForPod(pod.UID) {
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

var _ enroll.SettingsSource = (*ClaimStore)(nil)
