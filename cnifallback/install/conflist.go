package install

// The pure transforms: bytes in, bytes out, no files. Other plugins' JSON
// is carried as json.RawMessage, never decoded into maps, so their keys,
// key order and number literals survive; only whitespace is normalised
// (json.Indent, two spaces), which makes a file we wrote re-render to
// the same bytes.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// member is one key and its value, in file order.
type member struct {
	key string
	raw json.RawMessage
}

// object is a JSON object's members in file order.
type object []member

// parseObject splits a JSON object into its members without decoding the
// values. A duplicate key is an error: which one a reader would use
// depends on the reader.
func parseObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var o object
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("not JSON: key %v", tok)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not JSON: value of %q: %w", key, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		o = append(o, member{key, raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not JSON: data after the object")
	}
	return o, nil
}

// get returns the value of key and its index, or -1.
func (o object) get(key string) (json.RawMessage, int) {
	for i, m := range o {
		if m.key == key {
			return m.raw, i
		}
	}
	return nil, -1
}

// compact writes the object on one line; render indents it.
func (o object) compact() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(m.key))
		b.WriteByte(':')
		b.Write(m.raw)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// render is the file content: two-space indentation, a final newline.
func (o object) render() ([]byte, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, o.compact(), "", "  "); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// jsonString encodes s as a JSON string without HTML escaping (a CNI
// config is not HTML; "<" should stay "<").
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

func (e entry) marshal() json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e) // strings only: always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// kind names a JSON value's type for error messages.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// pluginType reads a plugin's "type" the way libcni does (decoding into a
// struct, so the key matches case-insensitively and the last one wins):
// whatever the runtime would execute is what we must recognise.
func pluginType(raw json.RawMessage) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return ""
	}
	return p.Type
}

// convertedFromOf reads a meshlet entry's convertedFrom.
func convertedFromOf(raw json.RawMessage) string {
	var e struct {
		ConvertedFrom string `json:"convertedFrom"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return ""
	}
	return e.ConvertedFrom
}

// validConvertedFrom: from may be restored next to the conflist target.
// It must be a plain file name with target's stem, so that a conflist
// cannot make Uninstall write anywhere else.
func validConvertedFrom(target, from string) bool {
	ext := filepath.Ext(from)
	if ext != ".conf" && ext != ".json" {
		return false
	}
	if from != filepath.Base(from) || strings.HasPrefix(from, ".") || strings.ContainsAny(from, `/\`) {
		return false
	}
	return strings.TrimSuffix(from, ext)+".conflist" == target
}

// conflist is a parsed conflist: its top-level members in file order (the
// "plugins" member's value is rebuilt from plugins when rendered).
type conflist struct {
	top     object
	plugins []json.RawMessage
}

// parseConflist checks data the way the runtime would (libcni) and splits
// it. Errors name the field at fault.
func parseConflist(data []byte) (*conflist, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	name, _ := top.get("name")
	if name == nil {
		return nil, errors.New(`no "name"`)
	}
	if k := kind(name); k != "a string" {
		return nil, fmt.Errorf(`"name" is %s, want a string`, k)
	}
	raw, _ := top.get("plugins")
	if raw == nil {
		// libcni would look for the plugins in a directory named after
		// the network; a file we cannot append to.
		return nil, errors.New(`no "plugins" array`)
	}
	if k := kind(raw); k != "an array" {
		return nil, fmt.Errorf(`"plugins" is %s, want an array`, k)
	}
	cl := &conflist{top: top}
	if err := json.Unmarshal(raw, &cl.plugins); err != nil {
		return nil, fmt.Errorf(`"plugins": %w`, err)
	}
	if len(cl.plugins) == 0 {
		return nil, errors.New(`"plugins" is empty`)
	}
	for i, p := range cl.plugins {
		if k := kind(p); k != "an object" {
			return nil, fmt.Errorf(`"plugins"[%d] is %s, want an object`, i, k)
		}
		if pluginType(p) == "" {
			return nil, fmt.Errorf(`"plugins"[%d] has no "type"`, i)
		}
	}
	// The final word is the runtime's library: whatever it refuses, the
	// runtime would not load either.
	if _, err := libcni.ConfListFromBytes(data); err != nil {
		return nil, err
	}
	return cl, nil
}

// render writes the conflist with plugins as its "plugins".
func (cl *conflist) render(plugins []json.RawMessage) ([]byte, error) {
	var arr bytes.Buffer
	arr.WriteByte('[')
	for i, p := range plugins {
		if i > 0 {
			arr.WriteByte(',')
		}
		arr.Write(p)
	}
	arr.WriteByte(']')
	top := make(object, len(cl.top))
	copy(top, cl.top)
	_, i := top.get("plugins")
	top[i].raw = arr.Bytes()
	return top.render()
}

// split separates meshlet's entries from the other plugins.
func (cl *conflist) split() (others, ours []json.RawMessage) { return cl.splitType(PluginType) }

// splitType separates the entries of plugin type typ from the others.
func (cl *conflist) splitType(typ string) (others, ours []json.RawMessage) {
	for _, p := range cl.plugins {
		if pluginType(p) == typ {
			ours = append(ours, p)
		} else {
			others = append(others, p)
		}
	}
	return others, ours
}

var errOnlyMeshlet = errors.New("no plugin besides meshlet-cni: nothing to chain after")

// chain returns the conflist data, to be written as the file target, with
// e as the one meshlet entry, last. changed is false when data already is
// that (out is then data itself, so that a correct file is never
// rewritten, however it is formatted). A stale entry's convertedFrom is
// kept when it is valid for target: it is what lets Uninstall restore
// the .conf.
func chain(target string, data []byte, e entry) (out []byte, changed bool, err error) {
	cl, err := parseConflist(data)
	if err != nil {
		return nil, false, err
	}
	others, ours := cl.split()
	if len(others) == 0 {
		return nil, false, errOnlyMeshlet
	}
	e.ConvertedFrom = ""
	for _, p := range ours {
		if from := convertedFromOf(p); validConvertedFrom(target, from) {
			e.ConvertedFrom = from
		}
	}
	want := e.marshal()
	last := cl.plugins[len(cl.plugins)-1]
	if len(ours) == 1 && pluginType(last) == PluginType && jsonEqual(last, want) {
		return data, false, nil
	}
	out, err = cl.render(append(others, want))
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// convert turns a single-plugin config (a .conf or .json named from) into
// a conflist with e chained after the plugin: {cniVersion, name,
// plugins: [the plugin without name and cniVersion, e]}. The plugin sees
// no difference: the runtime passes the list's name and cniVersion to
// every plugin. With record, e notes from so that Uninstall can restore
// it.
func convert(from string, data []byte, e entry, record bool) ([]byte, error) {
	conf, err := libcni.NetworkPluginConfFromBytes(data)
	if err != nil {
		return nil, err
	}
	if conf.Network.Type == PluginType {
		return nil, errOnlyMeshlet
	}
	if conf.Network.Name == "" {
		// A conflist needs a name; inventing one could not be undone.
		return nil, errors.New(`no "name": cannot convert it to a conflist`)
	}
	obj, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	// libcni reads name and cniVersion into a struct: any case matches,
	// the last wins (its parsed values are used). They move to the top
	// level in the order they came, so that Uninstall can put them back
	// there.
	var plugin, top object
	hasVersion, hasName := false, false
	for _, m := range obj {
		switch {
		case strings.EqualFold(m.key, "cniVersion"):
			if !hasVersion {
				top = append(top, member{"cniVersion", jsonString(conf.Network.CNIVersion)})
			}
			hasVersion = true
		case strings.EqualFold(m.key, "name"):
			if !hasName {
				top = append(top, member{"name", jsonString(conf.Network.Name)})
			}
			hasName = true
		default:
			plugin = append(plugin, m)
		}
	}
	top = append(top, member{"plugins", nil})
	e.ConvertedFrom = ""
	if record {
		e.ConvertedFrom = from
	}
	cl := &conflist{top: top}
	return cl.render([]json.RawMessage{plugin.compact(), e.marshal()})
}

// unchained is a conflist with meshlet's entries taken out.
type unchained struct {
	// data is the conflist without them, unless restore is set.
	data []byte
	// restore, when set, is the .conf the conflist was converted from,
	// to be written back (as restoreData) in place of the conflist.
	restore     string
	restoreData []byte
}

// unchain takes meshlet's entries out of the conflist named name. found
// is false when there are none. A conflist that convert made (a valid
// convertedFrom, one plugin left, no other top-level keys) is turned back
// into its .conf: name and cniVersion in their order, then the plugin's
// keys.
func unchain(name string, data []byte) (u unchained, found bool, err error) {
	cl, err := parseConflist(data)
	if err != nil {
		return u, false, err
	}
	others, ours := cl.split()
	if len(ours) == 0 {
		return u, false, nil
	}
	if len(others) == 0 {
		return u, true, errOnlyMeshlet
	}
	from := ""
	for _, p := range ours {
		if f := convertedFromOf(p); validConvertedFrom(name, f) {
			from = f
		}
	}
	if from != "" && len(others) == 1 {
		if conf, ok := restoreConf(cl.top, others[0]); ok {
			return unchained{restore: from, restoreData: conf}, true, nil
		}
	}
	u.data, err = cl.render(others)
	return u, true, err
}

// restoreConf rebuilds a single-plugin config from a converted conflist's
// top level and its one plugin, or reports that the conflist has changed
// too much since (other top-level keys, a plugin with its own name) for
// that to be lossless.
func restoreConf(top object, plugin json.RawMessage) ([]byte, bool) {
	var conf object
	for _, m := range top {
		switch m.key {
		case "cniVersion", "name":
			conf = append(conf, m)
		case "plugins":
		default:
			return nil, false
		}
	}
	obj, err := parseObject(plugin)
	if err != nil {
		return nil, false
	}
	for _, m := range obj {
		if strings.EqualFold(m.key, "cniVersion") || strings.EqualFold(m.key, "name") {
			return nil, false
		}
	}
	out, err := append(conf, obj...).render()
	return out, err == nil
}

// jsonEqual compares two JSON values by meaning.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
