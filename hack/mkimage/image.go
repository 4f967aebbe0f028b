package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image facts shared by every build.
const (
	Title       = "meshlet"
	Description = "meshlet, the node agent that enrolls pods into an Istio ambient-style mesh, meshlet-cni, its CNI plugin, and meshlet-gate, its container hook"
	Source      = "https://github.com/meshlet/meshlet"
	// License is the SPDX identifier of the repository's LICENSE, the
	// label org.opencontainers.image.licenses.
	License = "Apache-2.0"
	// DocDir holds the repository's LICENSE and NOTICE in the image, where
	// Debian keeps a package's (its copyright files are beside it).
	DocDir = "usr/share/doc/meshlet"
	// Path is the image's PATH: agent/redirect looks the iptables
	// commands up on it.
	Path = "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// LabelDebianPackages lists the Debian packages of the iptables layer
	// (name=version), where their source is to be had (GPL).
	LabelDebianPackages = "dev.meshlet.image.debian-packages"
)

// Inputs are what an image is built from.
type Inputs struct {
	Meta Meta
	// Platforms are the index's architectures, in order (nil: Platforms).
	Platforms []Platform
	// Binaries by architecture.
	Binaries map[string]Binaries
	// Userspace by architecture; nil: the image has no iptables userspace.
	Userspace map[string]*Userspace
	// Notices are the repository's licence files by name (LICENSE,
	// NOTICE), shipped in DocDir: the Apache License asks that a
	// redistribution carry both.
	Notices map[string][]byte
}

// Image is an assembled image.
type Image struct {
	Index  v1.ImageIndex
	Ref    string
	Digest v1.Hash
	Sizes  []Size
	// Epoch is the archive's timestamps, as the image's.
	Epoch time.Time
}

// Size is one platform's size.
type Size struct {
	Platform                 string
	Layers                   int
	Compressed, Uncompressed int64
}

// Labels are the image's OCI labels, also the index's annotations.
func Labels(m Meta) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       Title,
		"org.opencontainers.image.description": Description,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Epoch.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    License,
	}
	return l
}

// Assemble builds the index, the platforms concurrently (compressing the
// layers is most of the time).
func Assemble(in Inputs) (*Image, error) {
	type result struct {
		img  v1.Image
		size Size
		err  error
	}
	plats := in.Platforms
	if plats == nil {
		plats = Platforms
	}
	res := make([]result, len(plats))
	var wg sync.WaitGroup
	for i, p := range plats {
		wg.Go(func() {
			img, size, err := platformImage(in, p)
			res[i] = result{img, size, err}
		})
	}
	wg.Wait()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	out := &Image{Ref: in.Meta.Ref(), Epoch: in.Meta.Epoch}
	for i, p := range plats {
		if res[i].err != nil {
			return nil, fmt.Errorf("%s: %w", p, res[i].err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: res[i].img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: p.Arch, Variant: p.Variant},
		}})
		out.Sizes = append(out.Sizes, res[i].size)
	}
	annotated, ok := mutate.Annotations(idx, Labels(in.Meta)).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the index did not return an index")
	}
	out.Index = annotated
	var err error
	if out.Digest, err = out.Index.Digest(); err != nil {
		return nil, fmt.Errorf("index digest: %w", err)
	}
	return out, nil
}

// platformImage is one platform's image: base, Debian (if any) and meshlet
// layers.
func platformImage(in Inputs, p Platform) (v1.Image, Size, error) {
	epoch := in.Meta.Epoch
	size := Size{Platform: p.String()}
	type layerSpec struct {
		tree    Tree
		comment string
	}
	base := Tree{}
	base.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"))
	base.File("etc/group", 0o644, []byte("root:x:0:\n"))
	base.Dir("tmp", 0o1777)
	base.Dir("run", 0o755) // iptables-legacy's lock, /run/xtables.lock
	base.Dir("root", 0o700)
	specs := []layerSpec{{base, "base: root user, /tmp, /run"}}
	labels := Labels(in.Meta)
	if in.Userspace != nil {
		u := in.Userspace[p.Arch]
		if u == nil {
			return nil, size, fmt.Errorf("no Debian userspace for %s", p.Arch)
		}
		t, err := u.Tree()
		if err != nil {
			return nil, size, err
		}
		specs = append(specs, layerSpec{t, "Debian iptables userspace: " + strings.Join(u.Packages, " ")})
		labels[LabelDebianPackages] = strings.Join(u.Packages, " ")
	}
	bins := in.Binaries[p.Arch]
	if bins == nil {
		return nil, size, fmt.Errorf("no binaries for %s", p.Arch)
	}
	mt := Tree{}
	for _, c := range Commands {
		b, err := os.ReadFile(bins[c.Name])
		if err != nil {
			return nil, size, fmt.Errorf("binary %s: %w", c.Name, err)
		}
		mt.File(BinDir+"/"+c.Name, 0o755, b)
	}
	for name, text := range in.Notices {
		mt.File(DocDir+"/"+name, 0o644, text)
	}
	specs = append(specs, layerSpec{mt, "meshlet " + in.Meta.Version + " (" + in.Meta.Revision + ")"})

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	var adds []mutate.Addendum
	for _, s := range specs {
		stream, err := s.tree.Tar(epoch)
		if err != nil {
			return nil, size, err
		}
		l, err := NewLayer(stream)
		if err != nil {
			return nil, size, err
		}
		c, err := l.Size()
		if err != nil {
			return nil, size, err
		}
		size.Layers++
		size.Compressed += c
		size.Uncompressed += l.UncompressedSize
		adds = append(adds, mutate.Addendum{Layer: l.Layer, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: "hack/mkimage", Comment: s.comment,
		}})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, size, fmt.Errorf("layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, size, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = "linux", p.Arch, p.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + BinDir + "/meshlet"},
		// meshlet enters pods' network namespaces and programs nftables:
		// it runs as root, with the capabilities the DaemonSet grants.
		User:       "0:0",
		Env:        []string{Path},
		WorkingDir: "/",
		Labels:     labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, size, fmt.Errorf("config: %w", err)
	}
	return img, size, nil
}

// WriteArchive writes the image as an OCI image layout in a tar archive:
// oci-layout, index.json naming the image, and every blob, entries sorted,
// owned by 0:0, timestamps epoch. Written to a temporary file renamed into
// place, so a failed build leaves no truncated archive.
func (img *Image) WriteArchive(file string) (err error) {
	blobs := map[v1.Hash]func() (io.ReadCloser, error){}
	sizes := map[v1.Hash]int64{}
	addRaw := func(b []byte, d v1.Hash) {
		blobs[d] = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		sizes[d] = int64(len(b))
	}
	raw, err := img.Index.RawManifest()
	if err != nil {
		return err
	}
	addRaw(raw, img.Digest)
	im, err := img.Index.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range im.Manifests {
		pi, err := img.Index.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", desc.Digest, err)
		}
		m, err := pi.RawManifest()
		if err != nil {
			return err
		}
		addRaw(m, desc.Digest)
		c, err := pi.RawConfigFile()
		if err != nil {
			return err
		}
		cn, err := pi.ConfigName()
		if err != nil {
			return err
		}
		addRaw(c, cn)
		layers, err := pi.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return err
			}
			if sizes[d], err = l.Size(); err != nil {
				return err
			}
			blobs[d] = l.Compressed
		}
	}
	top := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIImageIndex, Digest: img.Digest, Size: int64(len(raw)),
		Annotations: map[string]string{
			// containerd names the imported image after this one...
			"io.containerd.image.name": img.Ref,
			// ...and other tools (podman load, skopeo) after this one.
			"org.opencontainers.image.ref.name": img.Ref,
		},
	}}}
	index, err := json.Marshal(top)
	if err != nil {
		return err
	}

	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(file), ".meshlet-image-*.tar")
	if err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	tw := tar.NewWriter(f)
	hdr := func(name string, typ byte, size int64) error {
		mode := int64(0o644)
		if typ == tar.TypeDir {
			mode = 0o755
		}
		return tw.WriteHeader(&tar.Header{Typeflag: typ, Name: name, Size: size, Mode: mode, ModTime: img.Epoch, Format: tar.FormatPAX})
	}
	type entry struct {
		name string
		open func() (io.ReadCloser, error)
		size int64
	}
	var entries []entry
	for d, open := range blobs {
		entries = append(entries, entry{"blobs/" + d.Algorithm + "/" + d.Hex, open, sizes[d]})
	}
	entries = append(entries,
		entry{"index.json", func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(index))), nil }, int64(len(index))},
		entry{"oci-layout", func() (io.ReadCloser, error) {
			return io.NopCloser(strings.NewReader(`{"imageLayoutVersion":"1.0.0"}`)), nil
		}, int64(len(`{"imageLayoutVersion":"1.0.0"}`))})
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := hdr(d, tar.TypeDir, 0); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := hdr(e.name, tar.TypeReg, e.size); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
		rc, err := e.open()
		if err != nil {
			return fmt.Errorf("blob %s: %w", e.name, err)
		}
		n, err := io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("write %s: %w", e.name, err)
		}
		if n != e.size {
			return fmt.Errorf("blob %s: %d bytes, descriptor says %d", e.name, n, e.size)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}
