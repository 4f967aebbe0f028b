// Package nodesettings is meshlet's node settings document
// (meshlet.dev/v1alpha1 NodeSettings): the settings an operator may change
// while meshlet runs, read from ConfigMaps and merged, in order, over the
// values of meshlet's flags. It decodes and validates documents, merges
// them and describes what changed; applying the values is the agent's.
package nodesettings

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Values are the effective node settings: the flags' values with every
// document merged over them.
type Values struct {
	// ExcludedNamespaces are never enrolled, whatever their labels.
	ExcludedNamespaces []string `json:"excludedNamespaces"`
	// DeniedRuntimeHandlers are RuntimeClass handlers whose pods are never
	// enrolled (in-pod rules cannot take effect in their sandboxes).
	DeniedRuntimeHandlers []string `json:"deniedRuntimeHandlers"`
	// DNSCapture is whether a pod's DNS goes to ztunnel when the pod does
	// not say (annotation ambient.istio.io/dns-capture).
	DNSCapture bool `json:"dnsCapture"`
	// IPv6 is whether pods' IPv6 traffic is redirected (Istio's
	// ambient.ipv6). Off, a pod with only IPv6 addresses is not enrolled.
	IPv6 bool `json:"ipv6"`
	// DataplaneModeLabel selects the mesh (value ambient) on pods and
	// namespaces, or opts a pod out (none).
	DataplaneModeLabel string `json:"dataplaneModeLabel"`
	// EnablementSelectors, when not nil, select the mesh's pods in place
	// of the dataplane-mode label (Istio's ambient enablement selectors).
	EnablementSelectors []EnablementSelector `json:"enablementSelectors"`
	// LogVerbosity is klog's -v.
	LogVerbosity int `json:"logVerbosity"`
	// EnrollTimeout bounds one enrollment inside a runtime's hook.
	EnrollTimeout Duration `json:"enrollTimeout"`
}

// Duration is a time.Duration written as Go writes it ("1.5s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as "1.5s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a duration as time.ParseDuration does.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration (want e.g. 1500ms or 1s): %q", b)
	}
	*d = Duration(v)
	return nil
}

// MaxEnrollTimeout is the runtime's NRI request timeout, which an
// enrollment must finish well inside: a timed-out hook drops the plugin
// and the pod starts unmeshed.
const MaxEnrollTimeout = 2 * time.Second

// MaxLogVerbosity is the highest -v meshlet logs anything at.
const MaxLogVerbosity = 10

// CheckName reports why name cannot be a namespace or a RuntimeClass
// handler (an RFC 1123 label); such a name would match nothing.
func CheckName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%q is not a name a namespace or RuntimeClass handler can have: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// CheckLabelKey reports why key cannot be a label key.
func CheckLabelKey(key string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("%q is not a label key: %s", key, strings.Join(errs, "; "))
	}
	return nil
}

// CheckEnrollTimeout reports why d cannot bound an enrollment.
func CheckEnrollTimeout(d time.Duration) error {
	if d <= 0 || d >= MaxEnrollTimeout {
		return fmt.Errorf("%v: want more than 0 and less than the runtime's %v NRI request timeout (a timed-out hook drops the plugin and the pod starts unmeshed)", d, MaxEnrollTimeout)
	}
	return nil
}

// CheckLogVerbosity reports why v cannot be klog's verbosity.
func CheckLogVerbosity(v int) error {
	if v < 0 || v > MaxLogVerbosity {
		return fmt.Errorf("%d: want 0 to %d", v, MaxLogVerbosity)
	}
	return nil
}

// Clone returns a copy of v that shares nothing with it.
func (v Values) Clone() Values {
	v.ExcludedNamespaces = slices.Clone(v.ExcludedNamespaces)
	v.DeniedRuntimeHandlers = slices.Clone(v.DeniedRuntimeHandlers)
	sel := make([]EnablementSelector, len(v.EnablementSelectors))
	for i, s := range v.EnablementSelectors {
		sel[i] = s.DeepCopy()
	}
	if v.EnablementSelectors == nil {
		sel = nil
	}
	v.EnablementSelectors = sel
	return v
}

// Merge returns base with each document's settings over it, in order: a
// setting the later document gives wins. base is not modified.
func Merge(base Values, docs ...*Document) Values {
	v := base.Clone()
	for _, d := range docs {
		if d == nil {
			continue
		}
		d.over(&v)
	}
	return v
}

// Diff lists what changed from old to new, one setting per line
// ("dnsCapture: true -> false"), in the document's order; nil when nothing
// did.
func Diff(old, new Values) []string {
	var out []string
	add := func(name string, o, n any, same bool) {
		if !same {
			out = append(out, fmt.Sprintf("%s: %s -> %s", name, show(o), show(n)))
		}
	}
	add("excludedNamespaces", old.ExcludedNamespaces, new.ExcludedNamespaces, slices.Equal(old.ExcludedNamespaces, new.ExcludedNamespaces))
	add("deniedRuntimeHandlers", old.DeniedRuntimeHandlers, new.DeniedRuntimeHandlers, slices.Equal(old.DeniedRuntimeHandlers, new.DeniedRuntimeHandlers))
	add("dnsCapture", old.DNSCapture, new.DNSCapture, old.DNSCapture == new.DNSCapture)
	add("ipv6", old.IPv6, new.IPv6, old.IPv6 == new.IPv6)
	add("dataplaneModeLabel", old.DataplaneModeLabel, new.DataplaneModeLabel, old.DataplaneModeLabel == new.DataplaneModeLabel)
	add("enablementSelectors", old.EnablementSelectors, new.EnablementSelectors,
		(old.EnablementSelectors == nil) == (new.EnablementSelectors == nil) &&
			slices.EqualFunc(old.EnablementSelectors, new.EnablementSelectors, EnablementSelector.Equal))
	add("logVerbosity", old.LogVerbosity, new.LogVerbosity, old.LogVerbosity == new.LogVerbosity)
	add("enrollTimeout", old.EnrollTimeout, new.EnrollTimeout, old.EnrollTimeout == new.EnrollTimeout)
	return out
}

// show writes a setting's value for Diff.
func show(v any) string {
	switch v := v.(type) {
	case []string:
		return "[" + strings.Join(v, ",") + "]"
	case []EnablementSelector:
		if v == nil {
			return "none (the dataplane-mode label selects)"
		}
		parts := make([]string, len(v))
		for i, s := range v {
			parts[i] = s.String()
		}
		return "[" + strings.Join(parts, "; ") + "]"
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}
