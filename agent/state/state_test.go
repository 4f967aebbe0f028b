package state

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cp := Checkpoint{Pods: []Pod{
		{UID: "b", Name: "p2", Namespace: "n", ServiceAccount: "sa", NetnsInode: 2, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}, DNSCapture: true},
		{UID: "a", Name: "p1", Namespace: "n", ServiceAccount: "default", NetnsInode: 1, IPs: []netip.Addr{netip.MustParseAddr("2001:db8::1")}, IPv6: true},
	}}
	if err := Save(dir, cp); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version || len(got.Pods) != 2 || got.Pods[0].UID != "a" || !reflect.DeepEqual(got.Pods[1], cp.Pods[1]) {
		t.Fatalf("round trip: %+v", got)
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
	for name, content := range map[string]string{
		"truncated":     `{"version":1,"pods":[{"uid":"a"`,
		"other version": `{"version":2,"pods":[]}`,
		"no inode":      `{"version":1,"pods":[{"uid":"a"}]}`,
		"bad address":   `{"version":1,"pods":[{"uid":"a","netnsInode":1,"ips":["not-an-ip"]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) {
				t.Fatalf("Load = %v, want ErrCorrupt naming the file", err)
			}
			moved, err := SetAside(dir)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(moved); string(b) != content {
				t.Fatalf("set-aside file lost its content")
			}
			if cp, err := Load(dir); err != nil || len(cp.Pods) != 0 {
				t.Fatalf("after SetAside: %+v, %v", cp, err)
			}
		})
	}
}
