package install

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUnchainIstioCNI: a conflist istio-cni chained itself into (its entry
// as its installer writes it) gets the primary's conflist back, byte for
// byte; a second pass finds nothing; a conflist with istio-cni alone is
// left and named; files that are not conflists are passed over.
func TestUnchainIstioCNI(t *testing.T) {
	e := newEnv(t)
	chained := readFile(t, filepath.Join("testdata", "istio-cni", "10-containerd-net.conflist"))
	writeFile(t, e.conf("10-containerd-net.conflist"), chained, 0o644)
	alone := []byte(`{"cniVersion": "1.0.0", "name": "alone", "plugins": [{"type": "istio-cni"}]}`)
	writeFile(t, e.conf("20-alone.conflist"), alone, 0o600)
	writeFile(t, e.conf("30-broken.conflist"), []byte(`{"plugins": [{"type": "istio-cni"`), 0o644)

	found, err := ChainedIn(e.confDir, IstioCNIPluginType)
	if want := []string{e.conf("10-containerd-net.conflist"), e.conf("20-alone.conflist")}; err != nil || !slices.Equal(found, want) {
		t.Fatalf("ChainedIn = %q, %v; want %q", found, err, want)
	}
	changed, err := Unchain(e.confDir, IstioCNIPluginType)
	if err == nil || !strings.Contains(err.Error(), "20-alone.conflist: istio-cni is its only plugin") {
		t.Errorf("Unchain error = %v; want the conflist with istio-cni alone named", err)
	}
	if want := []string{e.conf("10-containerd-net.conflist")}; !slices.Equal(changed, want) {
		t.Errorf("Unchain changed %q, want %q", changed, want)
	}
	primary := readFile(t, filepath.Join("testdata", "golden", "bridge", "in", "10-containerd-net.conflist"))
	if got := readFile(t, e.conf("10-containerd-net.conflist")); !bytes.Equal(got, primary) {
		t.Errorf("conflist after Unchain:\n%s\nwant the primary's:\n%s", got, primary)
	}
	if got := readFile(t, e.conf("20-alone.conflist")); !bytes.Equal(got, alone) {
		t.Errorf("a conflist with istio-cni alone was changed:\n%s", got)
	}
	if changed, err := Unchain(e.confDir, IstioCNIPluginType); len(changed) != 0 || err == nil {
		t.Errorf("second Unchain = %q, %v; want nothing changed and the lone conflist named", changed, err)
	}
	ents, err := os.ReadDir(e.confDir)
	if err != nil || len(ents) != 3 {
		t.Errorf("files in the CNI config directory (a temporary one left?): %v, %v", ents, err)
	}
}
