package v1alpha1

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const path = "config[0].opaque.parameters"

func TestDecodeAccepts(t *testing.T) {
	on, off := true, false
	for raw, want := range map[string]MeshConfig{
		`{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig"}`:                                             {APIVersion: GroupVersion, Kind: Kind},
		`{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig","dnsCapture":false}`:                          {APIVersion: GroupVersion, Kind: Kind, DNSCapture: &off},
		`{"kind":"MeshConfig","inboundCapture":true,"dnsCapture":true,"apiVersion":"meshlet.dev/v1alpha1"}`:     {APIVersion: GroupVersion, Kind: Kind, DNSCapture: &on, InboundCapture: &on},
		" {\n \"apiVersion\": \"meshlet.dev/v1alpha1\", \"kind\": \"MeshConfig\", \"inboundCapture\": false } ": {APIVersion: GroupVersion, Kind: Kind, InboundCapture: &off},
	} {
		got, err := Decode([]byte(raw), path)
		if err != nil {
			t.Errorf("Decode(%s): %v", raw, err)
			continue
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("Decode(%s) = %+v, want %+v", raw, *got, want)
		}
	}
}

// TestDecodeRefuses: every mistake is refused with the path of the field
// at fault and what was wrong; all of them at once, not the first only.
func TestDecodeRefuses(t *testing.T) {
	const ok = `"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig"`
	for raw, want := range map[string][]string{
		`{` + ok + `,"dnsCaptur":false}`:                      {path + `.dnsCaptur: unknown field (known: apiVersion, kind, dnsCapture, inboundCapture)`},
		`{` + ok + `,"dnsCapture":"false"}`:                   {path + `.dnsCapture: want true or false, got a string "false"`},
		`{` + ok + `,"dnsCapture":null}`:                      {path + `.dnsCapture: want true or false, got null`},
		`{` + ok + `,"inboundCapture":1}`:                     {path + `.inboundCapture: want true or false, got a number 1`},
		`{` + ok + `,"dnsCapture":true,"dnsCapture":false}`:   {path + `.dnsCapture: given more than once`},
		`{"apiVersion":"meshlet.dev/v1","kind":"MeshConfig"}`: {path + `.apiVersion: "meshlet.dev/v1", want "meshlet.dev/v1alpha1"`},
		`{"apiVersion":"meshlet.dev/v1alpha1","kind":"Mesh"}`: {path + `.kind: "Mesh", want "MeshConfig"`},
		`{"kind":"MeshConfig"}`:                               {path + `.apiVersion: "", want "meshlet.dev/v1alpha1"`},
		`{"apiVersion":7,"kind":"MeshConfig","extra":{}}`:     {path + `.apiVersion: want a string, got a number 7`, path + `.extra: unknown field`},
		`[]`:              {path + `: want an object, got a list`},
		`{` + ok + `} {}`: {path + `: not JSON: data after the object`},
		`{` + ok:          {path + `: not JSON`},
		``:                {path + `: not JSON`},
	} {
		cfg, err := Decode([]byte(raw), path)
		if err == nil || cfg != nil {
			t.Errorf("Decode(%s) = %+v, %v; want a refusal", raw, cfg, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Decode(%s) error %q lacks %q", raw, err, w)
			}
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("Decode(%s) error %q is not a FieldError", raw, err)
		}
	}
}

func TestOverride(t *testing.T) {
	on, off := true, false
	o := (&MeshConfig{DNSCapture: &off, InboundCapture: &off}).Override()
	if o.DNSCapture == nil || *o.DNSCapture || o.BypassInbound == nil || !*o.BypassInbound {
		t.Fatalf("dnsCapture=false inboundCapture=false gave %+v, want DNS capture off and inbound bypassed", o)
	}
	o = (&MeshConfig{InboundCapture: &on}).Override()
	if o.DNSCapture != nil || o.BypassInbound == nil || *o.BypassInbound {
		t.Fatalf("inboundCapture=true gave %+v, want inbound captured and DNS left to other sources", o)
	}
}

// FuzzDecode: any bytes are refused with a FieldError or give a config of
// this API that encodes and decodes to itself.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig","dnsCapture":false,"inboundCapture":true}`,
		`{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig","dnsCapture":true,"dnsCapture":false}`,
		`{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig","dnsCaptur":false}`,
		`{"apiVersion":"v1","kind":"ConfigMap"}`, `[]`, `null`, `{`, ``, `"x"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := Decode(raw, path)
		if err != nil {
			var fe *FieldError
			if cfg != nil || !errors.As(err, &fe) || !strings.HasPrefix(fe.Path, path) {
				t.Fatalf("refusal %v (config %+v) is not a FieldError under %s", err, cfg, path)
			}
			return
		}
		if cfg.APIVersion != GroupVersion || cfg.Kind != Kind {
			t.Fatalf("accepted %+v", cfg)
		}
		out, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(out, path)
		if err != nil || !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip of %s: %+v, %v", out, again, err)
		}
	})
}
