package env

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// writeImage writes an OCI image layout, as a tar archive `ctr images
// import` accepts, holding one deterministic layer with binary at /pause.
func writeImage(path, name, binary string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	epoch := time.Unix(0, 0)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(bin)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	layerDigest := digest(layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layer.Len()}},
	})
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "1"},
			"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
		}},
	})
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	out := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"blobs/sha256/" + digest(config)[7:], config},
		{"blobs/sha256/" + digest(manifest)[7:], manifest},
		{"blobs/sha256/" + layerDigest[7:], layer.Bytes()},
	}
	for _, fl := range files {
		if err := out.WriteHeader(&tar.Header{Name: fl.name, Mode: 0o644, Size: int64(len(fl.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := out.Write(fl.data); err != nil {
			return fmt.Errorf("write %s: %w", fl.name, err)
		}
	}
	return out.Close()
}
