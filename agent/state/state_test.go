package state

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	records := []enroll.Record{
		{UID: "b", SandboxID: "sb-b", Name: "p2", Namespace: "n", ServiceAccount: "sa", NetnsInode: 2, NetnsCookie: 77, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")},
			Settings: enroll.Settings{DNSCapture: true}, Redirection: "nftables/v1 ipv4 dns-capture inbound-capture"},
		{UID: "a", Name: "p1", Namespace: "n", ServiceAccount: "default", NetnsInode: 1, IPs: []netip.Addr{netip.MustParseAddr("2001:db8::1")},
			Settings: enroll.Settings{BypassInbound: true}, Redirection: "iptables/v1 ipv6"},
	}
	if err := Save(dir, "boot-1", records); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version || got.BootID != "boot-1" || len(got.Pods) != 2 || !reflect.DeepEqual(got.Pods[0], records[1]) || !reflect.DeepEqual(got.Pods[1], records[0]) {
		t.Fatalf("round trip (sorted by uid): %+v", got)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("state dir holds %d files after Save, want only the checkpoint (no temp files)", len(ents))
	}
}

func TestMissingIsEmpty(t *testing.T) {
	cp, err := Load(t.TempDir())
	if err != nil || len(cp.Pods) != 0 {
		t.Fatalf("Load of an empty dir = %+v, %v", cp, err)
	}
}

func TestCorruptIsRefusedLoudly(t *testing.T) {
	const pod = `"uid":"a","netnsInode":1,"ips":["192.0.2.1"]`
	for name, c := range map[string]struct{ content, reason string }{
		"truncated":      {`{"version":2,"pods":[{"uid":"a"`, "unexpected end"},
		"no uid":         {`{"version":2,"pods":[{"netnsInode":1,"ips":["192.0.2.1"]}]}`, "pods[0]: no uid"},
		"no inode":       {`{"version":2,"pods":[{"uid":"a","ips":["192.0.2.1"]}]}`, "no netnsInode"},
		"no addresses":   {`{"version":2,"pods":[{"uid":"a","netnsInode":1,"ips":[]}]}`, "no ips"},
		"empty address":  {`{"version":2,"pods":[{"uid":"a","netnsInode":1,"ips":[""]}]}`, "ips[0] is empty"},
		"bad address":    {`{"version":2,"pods":[{"uid":"a","netnsInode":1,"ips":["not-an-ip"]}]}`, "not-an-ip"},
		"duplicate uids": {`{"version":2,"pods":[{` + pod + `},{` + pod + `}]}`, "pods[1]: uid a appears twice"},
		"no boot ID":     {`{"version":3,"pods":[{` + pod + `}]}`, "bootID: missing"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) ||
				!strings.Contains(err.Error(), c.reason) {
				t.Fatalf("Load = %v, want ErrCorrupt naming the file and %q", err, c.reason)
			}
		})
	}
}

// TestVersion2IsRead: the checkpoint of the meshlet before boot IDs is
// read, its boot not known; a file without a boot ID is never written.
func TestVersion2IsRead(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"version":2,"pods":[{"uid":"a","netnsInode":1,"ips":["192.0.2.1"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := Load(dir)
	if err != nil || cp.BootID != "" || len(cp.Pods) != 1 || cp.Pods[0].SandboxID != "" {
		t.Fatalf("Load(version 2) = %+v, %v", cp, err)
	}
	if err := Save(dir, "", cp.Pods); err == nil {
		t.Fatal("Save without a boot ID succeeded")
	}
	if id, err := BootID(); err != nil || len(id) != 36 {
		t.Fatalf("BootID() = %q, %v; want the kernel's UUID", id, err)
	}
}

// TestOtherVersionIsNotCorrupt: a checkpoint an older (or newer) meshlet
// wrote is refused as such, not as a corrupt file.
func TestOtherVersionIsNotCorrupt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"version":1,"pods":[{"uid":"a","netnsInode":1,"ips":["192.0.2.1"],"dnsCapture":true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	if !errors.Is(err, ErrOtherVersion) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "version 1, this meshlet reads versions 2 to 3") {
		t.Fatalf("Load = %v, want ErrOtherVersion naming both versions", err)
	}
}

// TestSetAsideKeepsEveryCorruptFile: each corrupt checkpoint set aside gets
// a name of its own, even two within the same second.
func TestSetAsideKeepsEveryCorruptFile(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	var moved []string
	for _, content := range []string{"{first", "{second", "{third"} {
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		dst, err := SetAside(dir, now)
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, dst)
	}
	want := []string{FileName + ".corrupt-20261130T030405Z", FileName + ".corrupt-20261130T030405Z-1", FileName + ".corrupt-20261130T030405Z-2"}
	for i, content := range []string{"{first", "{second", "{third"} {
		if filepath.Base(moved[i]) != want[i] {
			t.Fatalf("set aside as %s, want %s", moved[i], want[i])
		}
		if b, _ := os.ReadFile(moved[i]); string(b) != content {
			t.Fatalf("%s holds %q, want %q", moved[i], b, content)
		}
	}
	if cp, err := Load(dir); err != nil || len(cp.Pods) != 0 {
		t.Fatalf("after SetAside: %+v, %v", cp, err)
	}
}

// TestRemoveCutWrites: what an agent killed between a checkpoint's write
// and its rename leaves (the temporary file, cut short) goes; the
// checkpoint before it and every other file stay.
func TestRemoveCutWrites(t *testing.T) {
	dir := t.TempDir()
	records := []enroll.Record{{UID: "a", Name: "p", Namespace: "n", NetnsInode: 1, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Redirection: "nftables/v1 ipv4"}}
	if err := Save(dir, "boot-1", records); err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, FileName+".tmp-4242")
	other := filepath.Join(dir, "nodelock")
	for path, b := range map[string][]byte{cut: full[:len(full)/2], other: nil} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveCutWrites(dir)
	if err != nil || len(removed) != 1 || removed[0] != cut {
		t.Fatalf("RemoveCutWrites = %v, %v; want %s removed", removed, err, cut)
	}
	if _, err := os.Stat(cut); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cut write is still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("another file went: %v", err)
	}
	got, err := Load(dir)
	if err != nil || len(got.Pods) != 1 || got.Pods[0].UID != "a" {
		t.Fatalf("the checkpoint before the cut write: %+v, %v", got, err)
	}
	if removed, err := RemoveCutWrites(dir); err != nil || len(removed) != 0 {
		t.Fatalf("second RemoveCutWrites = %v, %v; want nothing to do", removed, err)
	}
}
