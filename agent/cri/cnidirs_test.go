package cri

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestParseCNIDirs: the cni section of containerd's verbose status, as
// 1.7 (binDir) and 2.x (binDirs) spell it; anything else reports nothing.
func TestParseCNIDirs(t *testing.T) {
	for _, c := range []struct {
		config string
		want   CNIDirs
		ok     bool
	}{
		{`{"containerd":{},"cni":{"binDirs":["/opt/cni/bin","/usr/lib/cni"],"confDir":"/etc/cni/net.d","maxConfNum":1}}`,
			CNIDirs{"/etc/cni/net.d", []string{"/opt/cni/bin", "/usr/lib/cni"}}, true},
		{`{"cni":{"binDir":"/home/kubernetes/bin","confDir":"/etc/cni/net.d"}}`, CNIDirs{"/etc/cni/net.d", []string{"/home/kubernetes/bin"}}, true},
		{`{"cni":{"binDirs":["relative"],"confDir":"/etc/cni/net.d"}}`, CNIDirs{}, false},
		{`{"cni":{"binDirs":["/opt/cni/bin"]}}`, CNIDirs{}, false},
		{`{}`, CNIDirs{}, false},
		{``, CNIDirs{}, false},
		{`{"cni":"x"}`, CNIDirs{}, false},
	} {
		got, ok := parseCNIDirs(c.config)
		if ok != c.ok || (ok && (got.ConfDir != c.want.ConfDir || !slices.Equal(got.BinDirs, c.want.BinDirs))) {
			t.Errorf("parseCNIDirs(%s) = %+v, %v; want %+v, %v", c.config, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseCNIDirs: whatever the runtime reports, parsing never panics and
// what it returns is absolute.
func FuzzParseCNIDirs(f *testing.F) {
	f.Add(`{"cni":{"binDirs":["/opt/cni/bin"],"confDir":"/etc/cni/net.d"}}`)
	f.Add(`{"cni":{"binDir":"/opt/cni/bin","confDir":"/etc/cni/net.d"}}`)
	f.Add(`{"cni":{"binDirs":null,"confDir":7}}`)
	f.Fuzz(func(t *testing.T, config string) {
		dirs, ok := parseCNIDirs(config)
		if !ok {
			return
		}
		if !filepath.IsAbs(dirs.ConfDir) || len(dirs.BinDirs) == 0 || slices.ContainsFunc(dirs.BinDirs, func(d string) bool { return !filepath.IsAbs(d) }) {
			t.Fatalf("parseCNIDirs(%q) = %+v", config, dirs)
		}
	})
}
