package claimstore

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/apis/v1alpha1"
	"github.com/meshlet/meshlet/internal/privtest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func bp(b bool) *bool { return &b }

func meshConfig(dns, inbound *bool) v1alpha1.MeshConfig {
	return v1alpha1.MeshConfig{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.Kind, DNSCapture: dns, InboundCapture: inbound}
}

func testClaim(uid string, pods []string, dns, inbound *bool) Claim {
	return Claim{
		UID: uid, Namespace: "app", Name: "claim-" + uid, Pods: pods,
		Settings: meshConfig(dns, inbound),
		Devices:  []AllocatedDevice{{Request: "mesh", Pool: "node-1", Device: "mesh", ShareID: "share-" + uid}},
	}
}

func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fileStamp identifies a file's content without reading it: a write
// (temp file, then rename) changes the inode or the mtime.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func statOf(t *testing.T, path string) fileStamp {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = uint64(sys.Ino)
	}
	return st
}

func podSettings(s *Store, uid string) enroll.SettingsOverride {
	o, _ := s.PodSettings(&enroll.Pod{UID: uid}, enroll.PodInfo{})
	return o
}

func boolp(p *bool) string {
	if p == nil {
		return "nil"
	}
	if *p {
		return "true"
	}
	return "false"
}

// TestClaimStorePersists: what Put stored is what a new store (a
// restarted meshlet) reads back from the file, with the pod index and the
// settings derived from it.
func TestClaimStorePersists(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if s.Len() != 0 || s.Claimed("pod-a") {
		t.Fatalf("empty store: Len %d, Claimed %t", s.Len(), s.Claimed("pod-a"))
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("opening an empty store wrote a file: %v", err)
	}
	// Pod a has two claims: "b-claim" sets only inboundCapture=false,
	// "a-claim" sets dnsCapture=false and inboundCapture=true. By UID,
	// a-claim comes first and wins both its fields; dnsCapture falls to it
	// as well. Pod c has one claim setting only inboundCapture=false.
	c1 := testClaim("b-claim", []string{"pod-a", "pod-b"}, nil, bp(false))
	c2 := testClaim("a-claim", []string{"pod-a"}, bp(false), bp(true))
	c3 := testClaim("c-claim", []string{"pod-c"}, nil, bp(false))
	if err := s.Put(c1, c2); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(c3); err != nil {
		t.Fatal(err)
	}

	r := openStore(t, dir)
	if r.Len() != 3 {
		t.Fatalf("reopened Len = %d, want 3", r.Len())
	}
	for pod, want := range map[string]bool{"pod-a": true, "pod-b": true, "pod-c": true, "pod-x": false, "": false} {
		if got := r.Claimed(pod); got != want {
			t.Errorf("Claimed(%q) = %t, want %t", pod, got, want)
		}
	}
	got := r.ForPod("pod-a")
	if want := []Claim{c2, c1}; !reflect.DeepEqual(got, want) {
		t.Errorf("ForPod(pod-a) = %+v\nwant (by UID) %+v", got, want)
	}
	if got := r.ForPod("pod-x"); len(got) != 0 {
		t.Errorf("ForPod(pod-x) = %+v, want none", got)
	}

	// Pod a: a-claim (first by UID) gives dnsCapture=false and
	// inboundCapture=true (bypass false), though b-claim says inbound false.
	if o := podSettings(r, "pod-a"); boolp(o.DNSCapture) != "false" || boolp(o.BypassInbound) != "false" {
		t.Errorf("pod-a settings: DNSCapture %s BypassInbound %s, want false false (first claim by UID wins)", boolp(o.DNSCapture), boolp(o.BypassInbound))
	}
	// Pod b: b-claim only: inboundCapture=false is BypassInbound=true;
	// dnsCapture unset stays unset (left to annotations and defaults).
	if o := podSettings(r, "pod-b"); o.DNSCapture != nil || boolp(o.BypassInbound) != "true" {
		t.Errorf("pod-b settings: DNSCapture %s BypassInbound %s, want nil true", boolp(o.DNSCapture), boolp(o.BypassInbound))
	}
	if o := podSettings(r, "pod-x"); o.DNSCapture != nil || o.BypassInbound != nil {
		t.Errorf("unclaimed pod got settings %s %s", boolp(o.DNSCapture), boolp(o.BypassInbound))
	}

	// Put with a known UID replaces that claim, in the file too.
	c1b := testClaim("b-claim", []string{"pod-b"}, bp(true), nil)
	if err := r.Put(c1b); err != nil {
		t.Fatal(err)
	}
	r2 := openStore(t, dir)
	if r2.Len() != 3 || r2.Claimed("pod-a") != true || len(r2.ForPod("pod-a")) != 1 {
		t.Errorf("after replacing b-claim: Len %d, ForPod(pod-a) %+v; want 3 and only a-claim", r2.Len(), r2.ForPod("pod-a"))
	}
	if got := r2.ForPod("pod-b"); !reflect.DeepEqual(got, []Claim{c1b}) {
		t.Errorf("ForPod(pod-b) = %+v, want the replacement", got)
	}
}

// TestClaimStoreRemove: Remove returns what it removed and writes only
// when it removed something.
func TestClaimStoreRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s := openStore(t, dir)

	// On a store with no file: nothing to remove, no file created.
	if removed, err := s.Remove("nope"); err != nil || len(removed) != 0 {
		t.Fatalf("Remove on empty store = %v, %v", removed, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Remove of an unknown claim created the file: %v", err)
	}

	a, b := testClaim("a", []string{"pod-a"}, nil, nil), testClaim("b", []string{"pod-b"}, nil, nil)
	if err := s.Put(a, b); err != nil {
		t.Fatal(err)
	}
	before := statOf(t, path)
	content, _ := os.ReadFile(path)
	time.Sleep(10 * time.Millisecond) // a write now would change mtime

	removed, err := s.Remove("unknown-1", "unknown-2")
	if err != nil || len(removed) != 0 {
		t.Fatalf("Remove(unknown) = %v, %v; want nothing, nil", removed, err)
	}
	if after := statOf(t, path); after != before {
		t.Errorf("Remove of unknown UIDs rewrote the file: %+v -> %+v", before, after)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, content) {
		t.Errorf("file content changed")
	}

	removed, err = s.Remove("a", "unknown-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(removed, []Claim{a}) {
		t.Errorf("Remove(a, unknown-1) returned %+v, want [a]", removed)
	}
	if s.Claimed("pod-a") || !s.Claimed("pod-b") || s.Len() != 1 {
		t.Errorf("after Remove(a): Claimed(pod-a) %t Claimed(pod-b) %t Len %d", s.Claimed("pod-a"), s.Claimed("pod-b"), s.Len())
	}
	if r := openStore(t, dir); r.Claimed("pod-a") || r.Len() != 1 {
		t.Errorf("reopened after Remove(a): Claimed(pod-a) %t Len %d; the removal is not on disk", r.Claimed("pod-a"), r.Len())
	}

	// Again: already gone, no error, nothing returned, no write.
	before = statOf(t, path)
	time.Sleep(10 * time.Millisecond)
	removed, err = s.Remove("a")
	if err != nil || len(removed) != 0 {
		t.Errorf("second Remove(a) = %+v, %v; want nothing, nil", removed, err)
	}
	if after := statOf(t, path); after != before {
		t.Errorf("second Remove(a) rewrote the file")
	}

	// Removing the last claim leaves a valid, empty file.
	if _, err := s.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if r := openStore(t, dir); r.Len() != 0 {
		t.Errorf("reopened after removing all: Len %d", r.Len())
	}
}

// TestClaimStoreSharedDir: two meshlets (a rolling update) share the file;
// each sees the other's writes on its next read, without reopening, and a
// write by one keeps the other's claims.
func TestClaimStoreSharedDir(t *testing.T) {
	dir := t.TempDir()
	old := openStore(t, dir)
	next := openStore(t, dir)

	if err := old.Put(testClaim("a", []string{"pod-a"}, bp(false), nil)); err != nil {
		t.Fatal(err)
	}
	if !next.Claimed("pod-a") || next.Len() != 1 {
		t.Fatalf("other store does not see the Put: Claimed %t Len %d", next.Claimed("pod-a"), next.Len())
	}
	if o := podSettings(next, "pod-a"); boolp(o.DNSCapture) != "false" {
		t.Errorf("other store's settings for pod-a: DNSCapture %s, want false", boolp(o.DNSCapture))
	}

	// The new meshlet prepares another claim: the old one's stays.
	if err := next.Put(testClaim("b", []string{"pod-b"}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Store{"old": old, "next": next, "reopened": openStore(t, dir)} {
		if !s.Claimed("pod-a") || !s.Claimed("pod-b") || s.Len() != 2 {
			t.Errorf("%s store after both Puts: pod-a %t pod-b %t Len %d; want both", name, s.Claimed("pod-a"), s.Claimed("pod-b"), s.Len())
		}
	}

	// Unprepare through the old one: the new one forgets it; Remove via
	// the new one of a claim it learnt from the file returns it.
	if _, err := old.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if next.Claimed("pod-b") {
		t.Errorf("other store still sees the removed claim")
	}
	removed, err := next.Remove("a")
	if err != nil || len(removed) != 1 || removed[0].UID != "a" {
		t.Errorf("Remove(a) via the other store = %+v, %v", removed, err)
	}
	if old.Claimed("pod-a") || old.Len() != 0 {
		t.Errorf("old store after the other removed a: Claimed %t Len %d", old.Claimed("pod-a"), old.Len())
	}

	// The file removed by hand: nothing is prepared any more.
	if err := old.Put(testClaim("c", []string{"pod-c"}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if !next.Claimed("pod-c") {
		t.Fatal("other store does not see c")
	}
	if err := os.Remove(filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if next.Claimed("pod-c") || next.Len() != 0 {
		t.Errorf("file removed, store still has claims: Len %d", next.Len())
	}
}

// corruptFiles are claims files Open must refuse.
var corruptFiles = map[string]string{
	"garbage":        "not json at all",
	"empty":          "",
	"truncated":      `{"version":1,"claims":[{"uid":"a","namespace":"app"`,
	"trailing data":  `{"version":1,"claims":[]} {"version":1,"claims":[]}`,
	"trailing brace": `{"version":1,"claims":[]}}`,
	"trailing brack": `{"version":1,"claims":[]}]`,
	"unknown field":  `{"version":1,"claims":[{"uid":"a","podz":["x"]}]}`,
	"unknown top":    `{"version":1,"claims":[],"extra":true}`,
	"no version":     `{"claims":[]}`,
	"duplicate uid":  `{"version":1,"claims":[{"uid":"a"},{"uid":"a"}]}`,
	"missing uid":    `{"version":1,"claims":[{"namespace":"app"}]}`,
	"wrong type":     `{"version":1,"claims":[{"uid":"a","pods":"pod-a"}]}`,
	"null":           `null`,
}

func TestClaimStoreCorrupt(t *testing.T) {
	for name, content := range corruptFiles {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, %v; want an error wrapping ErrCorrupt", s, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			now := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
			dst, err := Reset(dir, now)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, "claims.json.corrupt-20240506T070809.123456789Z"); dst != want {
				t.Errorf("set aside as %s, want %s", dst, want)
			}
			if b, err := os.ReadFile(dst); err != nil || string(b) != content {
				t.Errorf("set-aside file: %q, %v; want the corrupt content", b, err)
			}
			s = openStore(t, dir) // the file was replaced, never missing
			if s.Len() != 0 {
				t.Errorf("store after the reset has %d claims", s.Len())
			}
		})
	}
	if _, err := SetAside(t.TempDir(), time.Now()); err == nil {
		t.Error("SetAside with no file: no error")
	}
}

// TestClaimStoreOtherVersion: a file another meshlet release wrote is
// neither read nor replaced: opening it and writing over it fail, and its
// bytes stay.
func TestClaimStoreOtherVersion(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.Put(testClaim("a", []string{"pod-a"}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	other := []byte(`{"version":2,"claims":[]}`)
	tmp := filepath.Join(dir, "other.tmp")
	if err := os.WriteFile(tmp, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrVersion) {
		t.Fatalf("Open = %v, want ErrVersion", err)
	}
	if err := s.Put(testClaim("b", []string{"pod-b"}, nil, nil)); !errors.Is(err, ErrVersion) {
		t.Fatalf("Put over another version's file = %v, want ErrVersion", err)
	}
	if _, err := s.Remove("a"); !errors.Is(err, ErrVersion) {
		t.Fatalf("Remove over another version's file = %v, want ErrVersion", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, FileName)); !bytes.Equal(b, other) {
		t.Fatalf("the other version's file became %s", b)
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, FileName+".corrupt-*")); len(aside) != 0 {
		t.Fatalf("the other version's file was set aside: %v", aside)
	}
}

// TestClaimStoreBecomesCorrupt: a file replaced by a corrupt one under a
// running store keeps its readers on the last good claims; the next write
// sets the corrupt file aside and rewrites the file from those claims, so
// Prepare and Unprepare go on.
func TestClaimStoreBecomesCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s := openStore(t, dir)
	good := testClaim("a", []string{"pod-a"}, bp(false), nil)
	if err := s.Put(good); err != nil {
		t.Fatal(err)
	}
	corrupt := []byte(`{"version":1,"claims":[{"uid":"a"},{"uid":"a"}]}`)
	tmp := filepath.Join(dir, "corrupt.tmp")
	if err := os.WriteFile(tmp, corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as a writer replaces the file
		t.Fatal(err)
	}
	if !s.Claimed("pod-a") || s.Len() != 1 || !reflect.DeepEqual(s.ForPod("pod-a"), []Claim{good}) {
		t.Errorf("readers lost the last good claims: Claimed %t Len %d", s.Claimed("pod-a"), s.Len())
	}
	if o := podSettings(s, "pod-a"); boolp(o.DNSCapture) != "false" {
		t.Errorf("pod-a lost its settings: DNSCapture %s", boolp(o.DNSCapture))
	}
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("opening the corrupt file = %v, want ErrCorrupt", err)
	}
	if err := s.Put(testClaim("b", []string{"pod-b"}, nil, nil)); err != nil {
		t.Fatalf("Put over a corrupt file: %v", err)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("set-aside files %v, want 1", aside)
	}
	if b, _ := os.ReadFile(aside[0]); !bytes.Equal(b, corrupt) {
		t.Errorf("the set-aside file holds %s, want the corrupt content", b)
	}
	fresh := openStore(t, dir)
	if !fresh.Claimed("pod-a") || !fresh.Claimed("pod-b") {
		t.Errorf("rewritten file: pod-a %t pod-b %t, want both", fresh.Claimed("pod-a"), fresh.Claimed("pod-b"))
	}
}

// TestClaimStorePutFails: a Put that cannot write changes nothing, in
// memory or on disk.
func TestClaimStorePutFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s := openStore(t, dir)
	a := testClaim("a", []string{"pod-a"}, bp(true), nil)
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	privtest.ReadOnlyDir(t, dir)

	if err := s.Put(testClaim("b", []string{"pod-b"}, nil, nil), testClaim("a", []string{"pod-z"}, bp(false), nil)); err == nil {
		t.Fatal("Put into a read-only directory succeeded")
	}
	if s.Claimed("pod-b") || s.Claimed("pod-z") || !s.Claimed("pod-a") || s.Len() != 1 {
		t.Errorf("failed Put changed the store: pod-a %t pod-b %t pod-z %t Len %d", s.Claimed("pod-a"), s.Claimed("pod-b"), s.Claimed("pod-z"), s.Len())
	}
	if o := podSettings(s, "pod-a"); boolp(o.DNSCapture) != "true" {
		t.Errorf("failed Put changed pod-a's settings: DNSCapture %s", boolp(o.DNSCapture))
	}
	if removed, err := s.Remove("a"); err == nil {
		t.Errorf("Remove from a read-only directory succeeded: %+v", removed)
	}
	if !s.Claimed("pod-a") {
		t.Errorf("failed Remove dropped the claim from memory")
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Errorf("file changed by failed writes")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after failed writes, want just the claims file", len(entries))
	}
}

// TestClaimsGolden pins the on-disk format: a change of it must be
// deliberate (and, if incompatible, come with a new Version).
func TestClaimsGolden(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	claims := []Claim{
		{
			UID: "8f14e45f-ceea-467f-a8b4-3f1c2a6e0b01", Namespace: "shop", Name: "web-mesh-x7k2p",
			Pods:     []string{"1c9a4b2e-0d3f-4a6b-9e8c-7f5d3b2a1c0e"},
			Settings: meshConfig(bp(false), bp(true)),
			Devices:  []AllocatedDevice{{Request: "mesh", Pool: "node-1", Device: "mesh", ShareID: "d4735e3a-265e-46d6-9f6c-2b1e9d7c5a10"}},
		},
		{
			UID: "45c48cce-2e2d-4fbd-aa1a-7a5f0b6c3d22", Namespace: "batch", Name: "job-mesh",
			Pods:     []string{"a1", "b2"},
			Settings: meshConfig(nil, nil),
			Devices:  []AllocatedDevice{{Request: "mesh/slot", Pool: "node-1", Device: "mesh-3"}},
		},
	}
	if err := s.Put(claims...); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "claims.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("claims file differs from %s (run with -update if deliberate):\n got: %s\nwant: %s", golden, got, want)
	}
	// And the golden file is readable as it is.
	gdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(gdir, FileName), want, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := openStore(t, gdir); r.Len() != 2 || !reflect.DeepEqual(r.ForPod("b2"), []Claim{claims[1]}) {
		t.Errorf("golden file reads back as Len %d, ForPod(b2) %+v", r.Len(), r.ForPod("b2"))
	}
}

// TestClaimStoreOfSharedClaim: a pod that joins a claim after the kubelet
// prepared it for another pod (the kubelet does not prepare it again) is
// found by the claim's name from its API object.
func TestClaimStoreOfSharedClaim(t *testing.T) {
	s := openStore(t, t.TempDir())
	c := testClaim("a", []string{"pod-a"}, bp(false), nil)
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	late := &enroll.Pod{UID: "pod-late", Namespace: c.Namespace}
	if got := s.Of(late, enroll.PodInfo{}); len(got) != 0 {
		t.Fatalf("a pod not naming the claim has %v", got)
	}
	info := enroll.PodInfo{ResourceClaims: []string{"other", c.Name}}
	if got := s.Of(late, info); len(got) != 1 || got[0].UID != "a" {
		t.Fatalf("the late pod's claims: %v, want claim a", got)
	}
	if o, _ := s.PodSettings(late, info); boolp(o.DNSCapture) != "false" {
		t.Fatalf("the late pod's settings: DNSCapture %s, want false", boolp(o.DNSCapture))
	}
	elsewhere := &enroll.Pod{UID: "pod-x", Namespace: "elsewhere"}
	if got := s.Of(elsewhere, info); len(got) != 0 {
		t.Fatalf("a pod in another namespace naming a claim of the same name has %v", got)
	}
	if got := s.Of(&enroll.Pod{UID: "pod-a", Namespace: c.Namespace}, info); len(got) != 1 {
		t.Fatalf("the claim's own pod has %d claims, want 1 (not counted twice)", len(got))
	}
}
