package install

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/meshlet/meshlet/cnifallback/shim"
)

var testEntry = entry{Type: PluginType, AgentSocket: testSocket}

func TestChainPutsOneEntryLast(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"none", `{"name":"n","plugins":[{"type":"a"},{"type":"b"}]}`},
		{"first", `{"name":"n","plugins":[{"type":"meshlet-cni","agentSocket":"/old"},{"type":"a"},{"type":"b"}]}`},
		{"middle", `{"name":"n","plugins":[{"type":"a"},{"type":"meshlet-cni"},{"type":"b"}]}`},
		{"last, old socket", `{"name":"n","plugins":[{"type":"a"},{"type":"b"},{"type":"meshlet-cni","agentSocket":"/old"}]}`},
		{"twice", `{"name":"n","plugins":[{"type":"meshlet-cni"},{"type":"a"},{"type":"b"},{"type":"meshlet-cni","agentSocket":"/var/run/meshlet/cni.sock"}]}`},
		{"type key in another case", `{"name":"n","plugins":[{"TYPE":"meshlet-cni"},{"type":"a"},{"type":"b"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := chain("10-n.conflist", []byte(tc.in), testEntry)
			if err != nil || !changed {
				t.Fatalf("chain: changed %v, %v", changed, err)
			}
			if !chainedLast(out, testSocket) {
				t.Fatalf("not one entry, last:\n%s", out)
			}
			var list struct{ Plugins []map[string]any }
			if err := json.Unmarshal(out, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Plugins) != 3 || list.Plugins[0]["type"] != "a" || list.Plugins[1]["type"] != "b" {
				t.Errorf("other plugins not kept in order:\n%s", out)
			}
			again, changed, err := chain("10-n.conflist", out, testEntry)
			if err != nil || changed || !bytes.Equal(again, out) {
				t.Errorf("second chain: changed %v, %v", changed, err)
			}
		})
	}
}

// TestChainKeepsOthersVerbatim: the other plugins' keys, key order,
// number literals and escapes survive; the top level's keys too.
func TestChainKeepsOthersVerbatim(t *testing.T) {
	in := `{"cniVersion":"1.1.0","name":"n","disableCheck":"true","disableGC":true,"cniVersions":["1.0.0","1.1.0"],"x-vendor":{"k":[1,2]},
	"plugins":[{"type":"z","b":12345678901234567890,"a":1.50,"html":"<&>","esc":"\u00e9\n","nested":{"y":1,"x":2}}]}`
	out, _, err := chain("10-n.conflist", []byte(in), testEntry)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{"cniVersion":"1.1.0","name":"n","disableCheck":"true","disableGC":true,"cniVersions":["1.0.0","1.1.0"],"x-vendor":{"k":[1,2]},"plugins":[`,
		`{"type":"z","b":12345678901234567890,"a":1.50,"html":"<&>","esc":"\u00e9\n","nested":{"y":1,"x":2}}`,
	} {
		if !strings.Contains(compact.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(string(out), "}\n") || !strings.Contains(string(out), "\n  \"plugins\": [\n    {\n      \"type\": \"z\",") {
		t.Errorf("not two-space indented:\n%s", out)
	}
}

// TestChainLeavesRightFileAlone: a file already right is returned as is,
// whatever its formatting: never rewritten for cosmetics.
func TestChainLeavesRightFileAlone(t *testing.T) {
	in := []byte("{\"name\":\"n\",\t\"plugins\":[ {\"type\":\"a\"},\n{\"agentSocket\":\"/var/run/meshlet/cni.sock\",\"type\":\"meshlet-cni\"}]}")
	out, changed, err := chain("10-n.conflist", in, testEntry)
	if err != nil || changed || !bytes.Equal(out, in) {
		t.Fatalf("changed %v, %v:\n%s", changed, err, out)
	}
}

// TestChainErrorsNameTheField: bad input gets an error naming what is
// wrong, and no output.
func TestChainErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"name":"n","plugins":[{"type":"a"}]`, "not JSON"},
		{`not json`, "not JSON"},
		{`[1]`, "not a JSON object"},
		{`{"name":"n","plugins":[{"type":"a"}]} {}`, "data after the object"},
		{`{"name":"n","plugins":{"type":"a"}}`, `"plugins" is an object, want an array`},
		{`{"name":"n","plugins":"bridge"}`, `"plugins" is a string, want an array`},
		{`{"name":"n","plugins":[]}`, `"plugins" is empty`},
		{`{"name":"n"}`, `no "plugins" array`},
		{`{"name":"n","plugins":[{"type":"a"},7]}`, `"plugins"[1] is a number, want an object`},
		{`{"name":"n","plugins":[{"type":"a"},{"ipam":{}}]}`, `"plugins"[1] has no "type"`},
		{`{"plugins":[{"type":"a"}]}`, `no "name"`},
		{`{"name":3,"plugins":[{"type":"a"}]}`, `"name" is a number, want a string`},
		{`{"name":"n","name":"m","plugins":[{"type":"a"}]}`, `duplicate key "name"`},
		{`{"name":"n","cniVersion":1,"plugins":[{"type":"a"}]}`, `cniVersion`},
		{`{"name":"n","disableCheck":"maybe","plugins":[{"type":"a"}]}`, `disableCheck`},
		{`{"name":"n","plugins":[{"type":"meshlet-cni"}]}`, `no plugin besides meshlet-cni`},
	} {
		out, _, err := chain("10-n.conflist", []byte(tc.in), testEntry)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out != nil {
			t.Errorf("chain(%s): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// TestEntryAcceptedByShim: the plugin reads what we write, as the
// runtime hands it over (the list's name and cniVersion added), and
// ignores convertedFrom.
func TestEntryAcceptedByShim(t *testing.T) {
	in := newInstaller(t, newEnv(t).config())
	e := in.entry
	e.ConvertedFrom = "10-bridge.conf"
	out, err := convert("10-bridge.conf", []byte(`{"cniVersion":"1.0.0","name":"net","type":"bridge"}`), e, true)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	raw := list.Plugins[len(list.Plugins)-1].Bytes
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m["convertedFrom"] != "10-bridge.conf" {
		t.Fatalf("entry lacks convertedFrom: %s", raw)
	}
	m["name"], m["cniVersion"] = list.Name, list.CNIVersion
	stdin, _ := json.Marshal(m)
	conf, err := shim.ParseConfig(stdin)
	if err != nil {
		t.Fatalf("shim.ParseConfig(%s): %v", stdin, err)
	}
	if conf.AgentSocket != testSocket || conf.AgentTimeout != "5s" || strings.Join(conf.ExcludeNamespaces, ",") != "istio-system,kube-system" {
		t.Errorf("shim read %+v", conf)
	}
	if d, _ := time.ParseDuration(conf.AgentTimeout); d != 5*time.Second {
		t.Errorf("agentTimeout %q", conf.AgentTimeout)
	}
}

func TestConvertRestoresLosslessly(t *testing.T) {
	for _, conf := range []string{
		"{\n  \"cniVersion\": \"0.4.0\",\n  \"name\": \"net\",\n  \"type\": \"bridge\",\n  \"z\": 1,\n  \"a\": {\n    \"b\": []\n  }\n}\n",
		"{\n  \"name\": \"net\",\n  \"type\": \"ptp\"\n}\n", // no cniVersion: none added
	} {
		out, err := convert("10-x.conf", []byte(conf), testEntry, true)
		if err != nil {
			t.Fatal(err)
		}
		u, found, err := unchain("10-x.conflist", out)
		if err != nil || !found {
			t.Fatalf("unchain: %v %v", found, err)
		}
		if u.restore != "10-x.conf" || string(u.restoreData) != conf {
			t.Errorf("restored %q as\n%s\nwant\n%s", u.restore, u.restoreData, conf)
		}
	}
	if _, err := convert("10-x.conf", []byte(`{"type":"bridge"}`), testEntry, true); err == nil || !strings.Contains(err.Error(), `no "name"`) {
		t.Errorf("convert without a name: %v", err)
	}
	if _, err := convert("10-x.conf", []byte(`{"name":"n"}`), testEntry, true); err == nil || !strings.Contains(err.Error(), "type") {
		t.Errorf("convert without a type: %v", err)
	}
}

// TestUnchainConvertedButChanged: once the converted conflist has grown
// (another plugin, another top-level key), Uninstall only takes meshlet
// out: restoring the .conf would lose what was added.
func TestUnchainConvertedButChanged(t *testing.T) {
	for _, in := range []string{
		`{"name":"n","plugins":[{"type":"a"},{"type":"b"},{"type":"meshlet-cni","convertedFrom":"10-x.conf"}]}`,
		`{"name":"n","disableCheck":true,"plugins":[{"type":"a"},{"type":"meshlet-cni","convertedFrom":"10-x.conf"}]}`,
		`{"name":"n","plugins":[{"type":"a","name":"own"},{"type":"meshlet-cni","convertedFrom":"10-x.conf"}]}`,
		`{"name":"n","plugins":[{"type":"a"},{"type":"meshlet-cni","convertedFrom":"../../etc/x.conf"}]}`,
	} {
		u, found, err := unchain("10-x.conflist", []byte(in))
		if err != nil || !found || u.restore != "" || u.data == nil || bytes.Contains(u.data, []byte(PluginType)) {
			t.Errorf("unchain(%s): %+v %v %v", in, u, found, err)
		}
	}
}

func TestValidConvertedFrom(t *testing.T) {
	for _, tc := range []struct {
		target, from string
		ok           bool
	}{
		{"10-bridge.conflist", "10-bridge.conf", true},
		{"10-bridge.conflist", "10-bridge.json", true},
		{"10-bridge.conflist", "10-other.conf", false},
		{"10-bridge.conflist", "../10-bridge.conf", false},
		{"10-bridge.conflist", "/etc/cni/net.d/10-bridge.conf", false},
		{"10-bridge.conflist", "10-bridge.conflist", false},
		{".conflist", ".conf", false},
		{OwnConflistName, "05-meshlet.conf", true},
	} {
		if got := validConvertedFrom(tc.target, tc.from); got != tc.ok {
			t.Errorf("validConvertedFrom(%q, %q) = %v", tc.target, tc.from, got)
		}
	}
}
