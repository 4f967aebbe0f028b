package install

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// FuzzChain: chaining any bytes never panics; when it succeeds, the
// runtime's library loads the result, meshlet-cni is in it once and last,
// chaining again changes nothing, and unchaining gives back the other
// plugins. The same for converting a single-plugin config.
func FuzzChain(f *testing.F) {
	for _, tc := range goldenCases {
		ents, _ := os.ReadDir(filepath.Join("testdata", "golden", tc.name, "in"))
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("testdata", "golden", tc.name, "in", e.Name()))
			if err == nil {
				f.Add(b)
			}
		}
	}
	for _, s := range []string{
		calicoList, otherList, bridgeConf, "", "null", "{}", "[]", `{"name":"n","plugins":[]}`,
		`{"name":"n","plugins":[{"type":"meshlet-cni"}]}`, `{"name":"n","plugins":{"type":"a"}}`,
		`{"name":"n","plugins":[{"TYPE":"meshlet-cni","type":"a"},{"type":"b","Type":"meshlet-cni"}]}`,
		`{"name":"n","cniVersions":["1.0.0","9.9.9"],"loadOnlyInlinedPlugins":true,"plugins":[{"type":"a"}]}`,
		`{"name":"\u00e9\ud800","plugins":[{"type":"a","x":1e308}]}`,
		`{"Name":"x","name":"n","CNIVERSION":"1.0.0","type":"t"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, changed, err := chain("10-f.conflist", data, testEntry)
		if err == nil {
			checkChained(t, out, testEntry)
			if !changed && !bytes.Equal(out, data) {
				t.Fatal("unchanged but different bytes")
			}
			checkUnchain(t, "10-f.conflist", data, out)
		}
		conv, err := convert("10-f.conf", data, testEntry, true)
		if err == nil {
			checkChained(t, conv, entry{Type: PluginType, AgentSocket: testSocket, ConvertedFrom: "10-f.conf"})
			u, found, err := unchain("10-f.conflist", conv)
			if err != nil || !found {
				t.Fatalf("unchain of a conversion: %v %v", found, err)
			}
			if u.restore != "10-f.conf" {
				t.Fatalf("conversion not restorable:\n%s", conv)
			}
			if !jsonEqualFolded(u.restoreData, data) {
				t.Fatalf("restored\n%s\nfrom\n%s", u.restoreData, data)
			}
		}
	})
}

func checkChained(t *testing.T, out []byte, e entry) {
	t.Helper()
	list, err := libcni.ConfListFromBytes(out)
	if err != nil {
		t.Fatalf("libcni refuses the output: %v\n%s", err, out)
	}
	n := 0
	for _, p := range list.Plugins {
		if p.Network.Type == PluginType {
			n++
		}
	}
	last := list.Plugins[len(list.Plugins)-1]
	if n != 1 || last.Network.Type != PluginType || !jsonEqual(last.Bytes, e.marshal()) {
		t.Fatalf("meshlet-cni %d times, last %s:\n%s", n, last.Bytes, out)
	}
	again, changed, err := chain("10-f.conflist", out, e)
	if err != nil || changed || !bytes.Equal(again, out) {
		t.Fatalf("chaining again: changed %v, %v", changed, err)
	}
}

// checkUnchain: out without meshlet holds in's other plugins, in order.
func checkUnchain(t *testing.T, name string, in, out []byte) {
	t.Helper()
	u, found, err := unchain(name, out)
	if err != nil || !found || u.restore != "" {
		t.Fatalf("unchain: %+v %v %v", u, found, err)
	}
	a, _ := parseConflist(in)
	b, err := parseConflist(u.data)
	if err != nil {
		t.Fatalf("unchained output does not parse: %v\n%s", err, u.data)
	}
	wantPlugins, _ := a.split()
	gotPlugins, ours := b.split()
	if len(ours) != 0 || len(gotPlugins) != len(wantPlugins) {
		t.Fatalf("unchained plugins %d (+%d ours), want %d", len(gotPlugins), len(ours), len(wantPlugins))
	}
	for i := range gotPlugins {
		if !bytes.Equal(compactJSON(t, gotPlugins[i]), compactJSON(t, wantPlugins[i])) {
			t.Fatalf("plugin %d changed: %s, want %s", i, gotPlugins[i], wantPlugins[i])
		}
	}
}

func compactJSON(t *testing.T, b []byte) []byte {
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		t.Fatal(err)
	}
	return c.Bytes()
}

// jsonEqualFolded compares a restored .conf with the original, as libcni
// reads them: name and cniVersion by any case (the last one wins).
func jsonEqualFolded(a, b []byte) bool {
	norm := func(data []byte) (map[string]any, bool) {
		o, err := parseObject(data)
		if err != nil {
			return nil, false
		}
		conf, err := libcni.NetworkPluginConfFromBytes(data)
		if err != nil {
			return nil, false
		}
		var plain object
		for _, m := range o {
			if !equalFoldAny(m.key, "name", "cniVersion") {
				plain = append(plain, m)
			}
		}
		var v map[string]any
		if json.Unmarshal(plain.compact(), &v) != nil {
			return nil, false
		}
		v["\x00name"], v["\x00cniVersion"] = conf.Network.Name, conf.Network.CNIVersion
		return v, true
	}
	x, ok1 := norm(a)
	y, ok2 := norm(b)
	return ok1 && ok2 && jsonEqual(mustJSON(x), mustJSON(y))
}

func equalFoldAny(s string, keys ...string) bool {
	for _, k := range keys {
		if bytes.EqualFold([]byte(s), []byte(k)) {
			return true
		}
	}
	return false
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
