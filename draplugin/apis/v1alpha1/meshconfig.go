// Package v1alpha1 is the meshlet.dev/v1alpha1 API: the per-pod mesh
// settings a ResourceClaim carries as opaque device configuration for the
// mesh.meshlet.dev driver.
//
//	config:
//	- opaque:
//	    driver: mesh.meshlet.dev
//	    parameters:
//	      apiVersion: meshlet.dev/v1alpha1
//	      kind: MeshConfig
//	      dnsCapture: false
//	      inboundCapture: true
//
// Decoding is strict: an unknown or repeated field, a wrong type, another
// apiVersion or kind is refused with the field's path, so a typo never
// silently falls back to a default.
package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/agent/enroll"
)

// The API's identity.
const (
	GroupVersion = "meshlet.dev/v1alpha1"
	Kind         = "MeshConfig"
)

// MeshConfig is one claim's mesh settings. A nil field leaves the setting
// to the pod's annotations and then the node's default.
type MeshConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// DNSCapture redirects the pod's DNS queries to ztunnel's DNS proxy
	// (the ambient.istio.io/dns-capture annotation's setting).
	DNSCapture *bool `json:"dnsCapture,omitempty"`
	// InboundCapture sends inbound traffic through ztunnel; false is
	// Istio's ambient.istio.io/bypass-inbound-capture=true.
	InboundCapture *bool `json:"inboundCapture,omitempty"`
}

// Override is the settings the claim gives, for the core's settings port.
func (c *MeshConfig) Override() enroll.SettingsOverride {
	o := enroll.SettingsOverride{DNSCapture: c.DNSCapture}
	if c.InboundCapture != nil {
		bypass := !*c.InboundCapture
		o.BypassInbound = &bypass
	}
	return o
}

// FieldError is a refused field, with its path from the claim's config
// ("config[0].opaque.parameters.dnsCapture").
type FieldError struct {
	Path   string
	Reason string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Reason }

// Decode reads opaque parameters (JSON, as the API server stores them) at
// path, the parameters' place in the claim. Every problem is reported,
// each as a *FieldError; on any error no config is returned.
func Decode(raw []byte, path string) (*MeshConfig, error) {
	fields, err := objectFields(raw)
	if err != nil {
		return nil, &FieldError{Path: path, Reason: err.Error()}
	}
	var c MeshConfig
	var errs []error
	seen := map[string]bool{}
	for _, f := range fields {
		fpath := path + "." + f.name
		if seen[f.name] {
			errs = append(errs, &FieldError{Path: fpath, Reason: "given more than once"})
			continue
		}
		seen[f.name] = true
		var dst any
		switch f.name {
		case "apiVersion":
			dst = &c.APIVersion
		case "kind":
			dst = &c.Kind
		case "dnsCapture":
			dst = &c.DNSCapture
		case "inboundCapture":
			dst = &c.InboundCapture
		default:
			errs = append(errs, &FieldError{Path: fpath, Reason: fmt.Sprintf("unknown field (known: %s)", strings.Join(knownFields, ", "))})
			continue
		}
		if err := json.Unmarshal(f.value, dst); err != nil || bytes.Equal(bytes.TrimSpace(f.value), []byte("null")) {
			errs = append(errs, &FieldError{Path: fpath, Reason: "want " + knownTypes[f.name] + ", got " + jsonKind(f.value)})
		}
	}
	if c.APIVersion != GroupVersion && !hasPathError(errs, path+".apiVersion") {
		errs = append(errs, &FieldError{Path: path + ".apiVersion", Reason: fmt.Sprintf("%q, want %q", c.APIVersion, GroupVersion)})
	}
	if c.Kind != Kind && !hasPathError(errs, path+".kind") {
		errs = append(errs, &FieldError{Path: path + ".kind", Reason: fmt.Sprintf("%q, want %q", c.Kind, Kind)})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &c, nil
}

var knownFields = []string{"apiVersion", "kind", "dnsCapture", "inboundCapture"}

var knownTypes = map[string]string{"apiVersion": "a string", "kind": "a string", "dnsCapture": "true or false", "inboundCapture": "true or false"}

func hasPathError(errs []error, path string) bool {
	return slices.ContainsFunc(errs, func(err error) bool {
		var fe *FieldError
		return errors.As(err, &fe) && fe.Path == path
	})
}

type field struct {
	name  string
	value json.RawMessage
}

// objectFields splits a JSON object into its fields in order, keeping
// repeated names (encoding/json would silently keep the last).
func objectFields(raw []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want an object, got %s", jsonKind(raw))
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		out = append(out, field{name: name, value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not JSON: data after the object")
	}
	return out, nil
}

// jsonKind names the JSON type of a value, for error messages; a long
// scalar is cut short.
func jsonKind(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) > 40 {
		v = append(v[:37:37], "..."...)
	}
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string " + string(v)
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number " + string(v)
	}
}
