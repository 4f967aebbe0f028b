package cnifallback

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestIstioCNILeft: istio-cni's plugin left in the chain stays unless
// --remove-istio-cni-plugin, which takes it out and nothing else.
func TestIstioCNILeft(t *testing.T) {
	istioCNIGrace = 0
	withIstio, err := os.ReadFile(filepath.Join("install", "testdata", "istio-cni", "10-containerd-net.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	primary, err := os.ReadFile(filepath.Join("install", "testdata", "golden", "bridge", "in", "10-containerd-net.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	for _, remove := range []bool{false, true} {
		dir := t.TempDir()
		file := filepath.Join(dir, "10-containerd-net.conflist")
		if err := os.WriteFile(file, withIstio, 0o644); err != nil {
			t.Fatal(err)
		}
		IstioCNILeft(context.Background(), Config{ConfDir: dir, RemoveIstioCNI: remove})
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want := withIstio
		if remove {
			want = primary
		}
		if !bytes.Equal(got, want) {
			t.Errorf("remove=%v: the conflist is\n%s\nwant\n%s", remove, got, want)
		}
	}
}
