package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Tree is a layer's content: entries by path (relative, no leading or
// trailing slash). Parent directories are added when it is written.
type Tree map[string]Entry

// Entry is one file, directory or symlink of a Tree.
type Entry struct {
	Type byte  // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	Mode int64 // permission bits
	Data []byte
	Link string // symlink target, as stored
}

// File adds a regular file.
func (t Tree) File(name string, mode int64, data []byte) {
	t[clean(name)] = Entry{Type: tar.TypeReg, Mode: mode, Data: data}
}

// Dir adds a directory (needed only for a mode other than 0755 or an empty
// one).
func (t Tree) Dir(name string, mode int64) { t[clean(name)] = Entry{Type: tar.TypeDir, Mode: mode} }

// Symlink adds a symbolic link.
func (t Tree) Symlink(name, target string) {
	t[clean(name)] = Entry{Type: tar.TypeSymlink, Mode: 0o777, Link: target}
}

func clean(name string) string { return strings.Trim(path.Clean("/"+name), "/") }

// Tar writes the tree as a reproducible tar stream: entries sorted by
// path, parents first, owned by 0:0 with no user or group names, every
// timestamp epoch. A parent that is a symlink or a file is refused: the
// runtime would unpack the entry somewhere else.
func (t Tree) Tar(epoch time.Time) ([]byte, error) {
	all := Tree{}
	for name, e := range t {
		all[name] = e
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if p, ok := t[dir]; ok && p.Type != tar.TypeDir {
				return nil, fmt.Errorf("layer entry %s: parent %s is not a directory", name, dir)
			}
			if _, ok := all[dir]; !ok {
				all[dir] = Entry{Type: tar.TypeDir, Mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	// Sorting "a/b" before "a/b/c" puts parents first; "a/b-c" may come
	// between, which is harmless.
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := all[n]
		h := &tar.Header{Typeflag: e.Type, Name: n, Mode: e.Mode, ModTime: epoch, Format: tar.FormatPAX}
		switch e.Type {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(e.Data))
		case tar.TypeSymlink:
			h.Linkname = e.Link
		default:
			return nil, fmt.Errorf("layer entry %s: unsupported type %q", n, e.Type)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", n, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return buf.Bytes(), nil
}

// Layer is a compressed layer with its uncompressed size.
type Layer struct {
	v1.Layer
	UncompressedSize int64
}

// NewLayer gzips a tar stream once (the archive writer and the digest both
// read the same bytes) into an OCI layer. compress/gzip writes no name or
// time in its header, so the bytes depend only on the input and the Go
// release. The default level: on meshlet's binary, level 9 takes three
// times as long for 0.5% less.
func NewLayer(stream []byte) (Layer, error) {
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.DefaultCompression)
	if err != nil {
		return Layer{}, err
	}
	if _, err := zw.Write(stream); err != nil {
		return Layer{}, fmt.Errorf("gzip layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return Layer{}, fmt.Errorf("gzip layer: %w", err)
	}
	gz := z.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return Layer{}, fmt.Errorf("layer: %w", err)
	}
	return Layer{Layer: l, UncompressedSize: int64(len(stream))}, nil
}
