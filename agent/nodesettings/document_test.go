package nodesettings

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func data(doc string) (map[string]string, []string) {
	return map[string]string{DataKey: doc}, []string{DataKey}
}

const header = "apiVersion: meshlet.dev/v1alpha1\nkind: NodeSettings\n"

func TestDecodeEverySetting(t *testing.T) {
	d, err := Decode(data(header + `
excludedNamespaces: [kube-system, monitoring]
deniedRuntimeHandlers: [runsc]
dnsCapture: false
ipv6: false
dataplaneModeLabel: example.com/mesh
enablementSelectors:
- podSelector:
    matchLabels: {example.com/mesh: ambient}
- podSelector:
    matchExpressions:
    - {key: example.com/mesh, operator: NotIn, values: [none]}
  namespaceSelector:
    matchLabels: {example.com/mesh: ambient}
logVerbosity: 4
enrollTimeout: 800ms
`))
	if err != nil {
		t.Fatal(err)
	}
	flags := Values{ExcludedNamespaces: []string{"kube-system"}, DNSCapture: true, IPv6: true, DataplaneModeLabel: "istio.io/dataplane-mode",
		LogVerbosity: 2, EnrollTimeout: Duration(1500 * time.Millisecond)}
	got := Merge(flags, d)
	if !slices.Equal(got.ExcludedNamespaces, []string{"kube-system", "monitoring"}) || !slices.Equal(got.DeniedRuntimeHandlers, []string{"runsc"}) ||
		got.DNSCapture || got.IPv6 || got.DataplaneModeLabel != "example.com/mesh" || len(got.EnablementSelectors) != 2 ||
		got.LogVerbosity != 4 || got.EnrollTimeout != Duration(800*time.Millisecond) {
		t.Fatalf("merged: %+v", got)
	}
	if want := []string{"dataplaneModeLabel", "deniedRuntimeHandlers", "dnsCapture", "enablementSelectors", "enrollTimeout", "excludedNamespaces", "ipv6", "logVerbosity"}; !slices.Equal(d.Settings(), want) {
		t.Errorf("Settings() = %v, want %v", d.Settings(), want)
	}
	// The flags' values are not touched.
	if !flags.DNSCapture || !flags.IPv6 || len(flags.ExcludedNamespaces) != 1 {
		t.Errorf("Merge modified its base: %+v", flags)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		keys []string
		want string // in the error
	}{
		{"no document", map[string]string{}, nil, "no key settings.yaml"},
		{"another key", map[string]string{DataKey: header, "setings.yaml": "x"}, []string{"setings.yaml", DataKey}, `key "setings.yaml" is not read`},
		{"unknown field", map[string]string{DataKey: header + "dnsCaptur: true\n"}, []string{DataKey}, `unknown field "dnsCaptur"`},
		{"repeated field", map[string]string{DataKey: header + "dnsCapture: true\ndnsCapture: false\n"}, []string{DataKey}, "dnsCapture"},
		{"wrong kind", map[string]string{DataKey: "apiVersion: meshlet.dev/v1alpha1\nkind: Settings\n"}, []string{DataKey}, "kind: Invalid value"},
		{"wrong version", map[string]string{DataKey: "apiVersion: meshlet.dev/v1\nkind: NodeSettings\n"}, []string{DataKey}, "apiVersion: Invalid value"},
		{"not yaml", map[string]string{DataKey: header + "dnsCapture: [\n"}, []string{DataKey}, "settings.yaml"},
		{"wrong type", map[string]string{DataKey: header + "dnsCapture: maybe\n"}, []string{DataKey}, "dnsCapture"},
		{"ipv6 not a boolean", map[string]string{DataKey: header + "ipv6: \"on\"\n"}, []string{DataKey}, "ipv6"},
		{"bad namespace", map[string]string{DataKey: header + "excludedNamespaces: [ok, Not_OK]\n"}, []string{DataKey}, "excludedNamespaces[1]: Invalid value"},
		{"duplicate namespace", map[string]string{DataKey: header + "excludedNamespaces: [a, b, a]\n"}, []string{DataKey}, "excludedNamespaces[2]: Duplicate value"},
		{"bad handler", map[string]string{DataKey: header + "deniedRuntimeHandlers: [gVisor]\n"}, []string{DataKey}, "deniedRuntimeHandlers[0]: Invalid value"},
		{"bad label key", map[string]string{DataKey: header + "dataplaneModeLabel: \"not a key\"\n"}, []string{DataKey}, "dataplaneModeLabel: Invalid value"},
		{"bad selector", map[string]string{DataKey: header + "enablementSelectors:\n- podSelector:\n    matchExpressions:\n    - {key: a, operator: Sometimes}\n"}, []string{DataKey}, "enablementSelectors[0].podSelector.matchExpressions[0].operator"},
		{"bad namespace selector", map[string]string{DataKey: header + "enablementSelectors:\n- namespaceSelector:\n    matchLabels: {\"a b\": x}\n"}, []string{DataKey}, "enablementSelectors[0].namespaceSelector.matchLabels"},
		{"verbosity", map[string]string{DataKey: header + "logVerbosity: 11\n"}, []string{DataKey}, "logVerbosity: Invalid value"},
		{"timeout too long", map[string]string{DataKey: header + "enrollTimeout: 2s\n"}, []string{DataKey}, "enrollTimeout: Invalid value"},
		{"timeout not a duration", map[string]string{DataKey: header + "enrollTimeout: soon\n"}, []string{DataKey}, "not a duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode(tc.data, tc.keys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %+v, %v; want an error with %q", d, err, tc.want)
			}
		})
	}
}

// An empty list given is a setting (nothing excluded); null or absent is
// none (the earlier value stays).
func TestMergeOrderAndEmptyLists(t *testing.T) {
	first, err := Decode(data(header + "excludedNamespaces: [a]\ndnsCapture: false\nlogVerbosity: 3\nenablementSelectors: [{podSelector: {matchLabels: {a: b}}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := Decode(data(header + "excludedNamespaces: []\ndnsCapture: true\nenablementSelectors: null\n"))
	if err != nil {
		t.Fatal(err)
	}
	flags := Values{ExcludedNamespaces: []string{"kube-system"}, DataplaneModeLabel: "l", EnrollTimeout: Duration(time.Second)}
	got := Merge(flags, first, second)
	if got.ExcludedNamespaces == nil || len(got.ExcludedNamespaces) != 0 || !got.DNSCapture || got.LogVerbosity != 3 || len(got.EnablementSelectors) != 1 {
		t.Fatalf("Merge(first, second) = %+v", got)
	}
	got = Merge(flags, second, first)
	if !slices.Equal(got.ExcludedNamespaces, []string{"a"}) || got.DNSCapture {
		t.Fatalf("Merge(second, first) = %+v", got)
	}
	if got := Merge(flags, nil); !slices.Equal(got.ExcludedNamespaces, flags.ExcludedNamespaces) {
		t.Fatalf("Merge(nil) = %+v", got)
	}
}

func TestDiff(t *testing.T) {
	old := Values{ExcludedNamespaces: []string{"kube-system"}, DNSCapture: true, DataplaneModeLabel: "l", EnrollTimeout: Duration(time.Second)}
	if d := Diff(old, old.Clone()); d != nil {
		t.Fatalf("Diff of equal values = %v", d)
	}
	selectNone := old.Clone()
	selectNone.EnablementSelectors = []EnablementSelector{}
	if d := Diff(old, selectNone); len(d) != 1 {
		t.Fatalf("Diff(label rules, no selector) = %v, want one change: an empty list selects no pod", d)
	}
	sel := []EnablementSelector{{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}}
	n := old.Clone()
	n.DNSCapture, n.IPv6, n.ExcludedNamespaces, n.EnablementSelectors, n.EnrollTimeout = false, true, []string{"kube-system", "x"}, sel, Duration(500*time.Millisecond)
	want := []string{
		"excludedNamespaces: [kube-system] -> [kube-system,x]",
		"dnsCapture: true -> false",
		"ipv6: false -> true",
		"enablementSelectors: none (the dataplane-mode label selects) -> [pods {a=b} in namespaces (all)]",
		"enrollTimeout: 1s -> 500ms",
	}
	if got := Diff(old, n); !slices.Equal(got, want) {
		t.Fatalf("Diff = %q\nwant %q", got, want)
	}
}

func TestSelectorsMatchAsIstio(t *testing.T) {
	// Istio's default selectors: the label rules.
	d, err := Decode(data(header + `
enablementSelectors:
- podSelector:
    matchLabels: {istio.io/dataplane-mode: ambient}
- podSelector:
    matchExpressions:
    - {key: istio.io/dataplane-mode, operator: NotIn, values: [none]}
  namespaceSelector:
    matchLabels: {istio.io/dataplane-mode: ambient}
`))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := Compile(*d.EnablementSelectors)
	if err != nil {
		t.Fatal(err)
	}
	ambient := map[string]string{"istio.io/dataplane-mode": "ambient"}
	none := map[string]string{"istio.io/dataplane-mode": "none"}
	for _, tc := range []struct {
		name    string
		pod, ns map[string]string
		want    bool
	}{
		{"pod label", ambient, nil, true},
		{"namespace label", nil, ambient, true},
		{"pod opts out", none, ambient, false},
		{"neither", map[string]string{"app": "x"}, map[string]string{"team": "y"}, false},
	} {
		got := false
		for _, s := range sel {
			got = got || s.Matches(tc.pod, tc.ns)
		}
		if got != tc.want {
			t.Errorf("%s: matches = %v, want %v", tc.name, got, tc.want)
		}
	}
	if sel, err := Compile(nil); sel != nil || err != nil {
		t.Errorf("Compile(nil) = %v, %v; want nil (no selectors: the label rules)", sel, err)
	}
	if sel, err := Compile([]EnablementSelector{}); sel == nil || len(sel) != 0 || err != nil {
		t.Errorf("Compile([]) = %v, %v; want an empty list (selects no pod)", sel, err)
	}
}
