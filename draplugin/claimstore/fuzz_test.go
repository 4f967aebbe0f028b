package claimstore

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse: parse never panics, refuses only with
// ErrCorrupt, and what it accepts survives being written in the
// file's format and read again.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "claims.golden")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"claims":[]}`))
	f.Add([]byte(`{"version":1,"claims":[{"uid":"a","namespace":"n","name":"c","pods":["p"],"settings":{"apiVersion":"meshlet.dev/v1alpha1","kind":"MeshConfig","dnsCapture":false},"devices":[{"request":"mesh","pool":"n1","device":"mesh","shareID":"s"}]}]}`))
	f.Add([]byte(`{"version":1,"claims":[{"uid":"a","pods":null,"devices":null}]}`))
	f.Add([]byte(`{"version":2,"claims":[]}`))
	for _, c := range corruptFiles {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		claims, err := parse(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("refused with %v, not ErrCorrupt or ErrVersion", err)
			}
			return
		}
		out, err := json.MarshalIndent(fileContent{Version: Version, Claims: claims}, "", "  ")
		if err != nil {
			t.Fatalf("accepted claims do not marshal: %v", err)
		}
		again, err := parse(out)
		if err != nil {
			t.Fatalf("written form of accepted claims refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(claims, again) {
			t.Fatalf("round trip changed the claims:\n%+v\n%+v", claims, again)
		}
	})
}
