package nodesettings

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzDecode: whatever a ConfigMap holds, Decode returns a valid document
// or an error, never panics; a document it accepts survives a round trip
// through JSON (how --state-dir keeps it) with the same settings.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		header,
		header + "dnsCapture: false\n",
		header + "ipv6: false\ndnsCapture: true\n",
		header + "excludedNamespaces: [kube-system, monitoring]\ndeniedRuntimeHandlers: []\n",
		header + "enablementSelectors:\n- podSelector:\n    matchLabels: {a: b}\n  namespaceSelector:\n    matchExpressions:\n    - {key: c, operator: Exists}\n",
		header + "logVerbosity: 4\nenrollTimeout: 900ms\ndataplaneModeLabel: example.com/mesh\n",
		header + "enrollTimeout: 2s\n",
		"kind: NodeSettings\n",
		"{}",
		"",
		"- a\n- b\n",
		header + "dnsCapture: true\ndnsCapture: false\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		d, err := Decode(map[string]string{DataKey: text}, []string{DataKey})
		if err != nil {
			return
		}
		if errs := d.Validate(); len(errs) > 0 {
			t.Fatalf("Decode accepted an invalid document: %v", errs)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var again Document
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if !slices.Equal(again.Settings(), d.Settings()) || Diff(Merge(Values{}, d), Merge(Values{}, &again)) != nil {
			t.Fatalf("round trip changed the document: %s", b)
		}
		if _, err := Compile(Merge(Values{}, d).EnablementSelectors); err != nil {
			t.Fatalf("a valid document's selectors do not compile: %v", err)
		}
	})
}
