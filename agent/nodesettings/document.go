package nodesettings

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// The document's type, and the ConfigMap key it is read from.
const (
	APIVersion = "meshlet.dev/v1alpha1"
	Kind       = "NodeSettings"
	DataKey    = "settings.yaml"
)

// Document is one NodeSettings document. A setting it leaves out (null)
// is left to the documents before it and to meshlet's flags; a list given
// empty ([]) empties it.
type Document struct {
	APIVersion            string                `json:"apiVersion"`
	Kind                  string                `json:"kind"`
	ExcludedNamespaces    *[]string             `json:"excludedNamespaces,omitempty"`
	DeniedRuntimeHandlers *[]string             `json:"deniedRuntimeHandlers,omitempty"`
	DNSCapture            *bool                 `json:"dnsCapture,omitempty"`
	IPv6                  *bool                 `json:"ipv6,omitempty"`
	DataplaneModeLabel    *string               `json:"dataplaneModeLabel,omitempty"`
	EnablementSelectors   *[]EnablementSelector `json:"enablementSelectors,omitempty"`
	LogVerbosity          *int                  `json:"logVerbosity,omitempty"`
	EnrollTimeout         *Duration             `json:"enrollTimeout,omitempty"`
}

// Decode reads the document from a ConfigMap's data: strictly (an
// unknown or repeated field is an error, naming it), then validated (an
// invalid setting is an error naming its field path). keys are every key
// of the ConfigMap's data and binaryData: the document must be the only
// one, so that a misnamed key is not silently ignored.
func Decode(data map[string]string, keys []string) (*Document, error) {
	for _, k := range keys {
		if k != DataKey {
			return nil, fmt.Errorf("data: key %q is not read by meshlet: the ConfigMap holds one key, %s", k, DataKey)
		}
	}
	text, ok := data[DataKey]
	if !ok {
		return nil, fmt.Errorf("data: no key %s (the NodeSettings document)", DataKey)
	}
	var d Document
	if err := yaml.UnmarshalStrict([]byte(text), &d); err != nil {
		return nil, fmt.Errorf("%s: %w", DataKey, err)
	}
	if err := d.Validate().ToAggregate(); err != nil {
		return nil, fmt.Errorf("%s: %w", DataKey, err)
	}
	return &d, nil
}

// Validate lists every setting of d that cannot work, with its field
// path.
func (d *Document) Validate() field.ErrorList {
	var errs field.ErrorList
	if d.APIVersion != APIVersion {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), d.APIVersion, "want "+APIVersion))
	}
	if d.Kind != Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), d.Kind, "want "+Kind))
	}
	names := func(path string, list *[]string) {
		if list == nil {
			return
		}
		p := field.NewPath(path)
		for i, n := range *list {
			if err := CheckName(n); err != nil {
				errs = append(errs, field.Invalid(p.Index(i), n, err.Error()))
			} else if slices.Index(*list, n) < i {
				errs = append(errs, field.Duplicate(p.Index(i), n))
			}
		}
	}
	names("excludedNamespaces", d.ExcludedNamespaces)
	names("deniedRuntimeHandlers", d.DeniedRuntimeHandlers)
	if d.DataplaneModeLabel != nil {
		if err := CheckLabelKey(*d.DataplaneModeLabel); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("dataplaneModeLabel"), *d.DataplaneModeLabel, err.Error()))
		}
	}
	if d.EnablementSelectors != nil {
		p := field.NewPath("enablementSelectors")
		for i, s := range *d.EnablementSelectors {
			errs = append(errs, s.validate(p.Index(i))...)
		}
	}
	if d.LogVerbosity != nil {
		if err := CheckLogVerbosity(*d.LogVerbosity); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("logVerbosity"), *d.LogVerbosity, err.Error()))
		}
	}
	if d.EnrollTimeout != nil {
		if err := CheckEnrollTimeout(time.Duration(*d.EnrollTimeout)); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("enrollTimeout"), d.EnrollTimeout.String(), err.Error()))
		}
	}
	return errs
}

// over sets in v the settings d gives.
func (d *Document) over(v *Values) {
	if d.ExcludedNamespaces != nil {
		v.ExcludedNamespaces = slices.Clone(*d.ExcludedNamespaces)
	}
	if d.DeniedRuntimeHandlers != nil {
		v.DeniedRuntimeHandlers = slices.Clone(*d.DeniedRuntimeHandlers)
	}
	if d.DNSCapture != nil {
		v.DNSCapture = *d.DNSCapture
	}
	if d.IPv6 != nil {
		v.IPv6 = *d.IPv6
	}
	if d.DataplaneModeLabel != nil {
		v.DataplaneModeLabel = *d.DataplaneModeLabel
	}
	if d.EnablementSelectors != nil {
		sel := make([]EnablementSelector, len(*d.EnablementSelectors))
		for i, s := range *d.EnablementSelectors {
			sel[i] = s.DeepCopy()
		}
		v.EnablementSelectors = sel
	}
	if d.LogVerbosity != nil {
		v.LogVerbosity = *d.LogVerbosity
	}
	if d.EnrollTimeout != nil {
		v.EnrollTimeout = *d.EnrollTimeout
	}
}

// Settings lists the settings d gives, by field name, for logs.
func (d *Document) Settings() []string {
	var out []string
	for name, set := range map[string]bool{
		"excludedNamespaces": d.ExcludedNamespaces != nil, "deniedRuntimeHandlers": d.DeniedRuntimeHandlers != nil,
		"dnsCapture": d.DNSCapture != nil, "ipv6": d.IPv6 != nil, "dataplaneModeLabel": d.DataplaneModeLabel != nil,
		"enablementSelectors": d.EnablementSelectors != nil, "logVerbosity": d.LogVerbosity != nil,
		"enrollTimeout": d.EnrollTimeout != nil,
	} {
		if set {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// String is the document's settings, for logs.
func (d *Document) String() string { return strings.Join(d.Settings(), ",") }
