package state_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/state"
)

// TestCorruptCheckpointIsSetAside: a start-up with a corrupt checkpoint
// adopts nothing and keeps the file for the operator, under a new name.
func TestCorruptCheckpointIsSetAside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, state.FileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	if got := state.LoadAtStart(dir, "boot-1", logger); len(got) != 0 {
		t.Fatalf("records from a corrupt checkpoint: %v", got)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), state.FileName+".corrupt-") {
		t.Fatalf("state dir after start-up: %v, want only the corrupt file set aside", ents)
	}
}

// TestOlderCheckpointIsIgnoredQuietly: an upgrade from an older checkpoint
// format adopts nothing and leaves the file to be replaced, not set aside.
func TestOlderCheckpointIsIgnoredQuietly(t *testing.T) {
	dir := t.TempDir()
	old := []byte(`{"version":1,"pods":[{"uid":"a","netnsInode":1,"ips":["192.0.2.1"],"dnsCapture":true}]}`)
	if err := os.WriteFile(filepath.Join(dir, state.FileName), old, 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	if got := state.LoadAtStart(dir, "boot-1", logger); len(got) != 0 {
		t.Fatalf("records from an older checkpoint: %v", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, state.FileName)); err != nil || string(b) != string(old) {
		t.Fatalf("older checkpoint moved or changed: %q, %v", b, err)
	}
}

// TestCheckpointOfAnotherBootIsDropped: after a reboot the checkpoint's
// records name namespaces that died, whose inodes and cookies the kernel
// gives to new ones: none is adopted. Records of this boot are, and so
// are an older meshlet's, whose boot is not known (their addresses are
// checked when adopted).
func TestCheckpointOfAnotherBootIsDropped(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	dir := t.TempDir()
	records := []enroll.Record{{UID: "a", SandboxID: "sb", NetnsInode: 4026532174, NetnsCookie: 9,
		IPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Redirection: "nftables/v1 ipv4"}}
	if err := state.Save(dir, "boot-1", records); err != nil {
		t.Fatal(err)
	}
	if got := state.LoadAtStart(dir, "boot-2", logger); len(got) != 0 {
		t.Fatalf("records adopted from another boot: %+v", got)
	}
	if got := state.LoadAtStart(dir, "boot-1", logger); len(got) != 1 || got[0].NetnsCookie != 9 {
		t.Fatalf("records of this boot: %+v, want the one saved", got)
	}
	legacy := []byte(`{"version":2,"pods":[{"uid":"a","netnsInode":1,"ips":["192.0.2.1"]}]}`)
	if err := os.WriteFile(filepath.Join(dir, state.FileName), legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := state.LoadAtStart(dir, "boot-2", logger); len(got) != 1 || got[0].SandboxID != "" {
		t.Fatalf("records of an older meshlet: %+v, want the one it wrote", got)
	}
}
