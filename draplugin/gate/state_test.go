package gate

import (
	"os"
	"strings"
	"testing"
)

// TestParseStateContainerd: the state containerd's runc passes to a
// createRuntime hook (its shape as seen on containerd 2.4.2) gives the
// container, its process and its pod.
func TestParseStateContainerd(t *testing.T) {
	b, err := os.ReadFile("testdata/containerd-state.json")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseState(b)
	if err != nil {
		t.Fatal(err)
	}
	want := State{ID: "4f1e0c2b9a3d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f", Pid: 4242,
		PodUID: "6c1f3a52-8d0e-4c7b-9f2a-1e5d7b3c9a40", SandboxID: "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"}
	if st != want {
		t.Fatalf("state %+v, want %+v", st, want)
	}
}

// TestParseStateCRIO: CRI-O names the sandbox in its own annotation and
// not the pod's UID; the namespace alone decides then.
func TestParseStateCRIO(t *testing.T) {
	st, err := ParseState([]byte(`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":7,"annotations":{"io.kubernetes.cri-o.SandboxID":"s1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if st != (State{ID: "c1", Pid: 7, SandboxID: "s1"}) {
		t.Fatalf("state %+v", st)
	}
}

// TestParseStateRefusals: each refusal names what is wrong.
func TestParseStateRefusals(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"not JSON":           {`pid=1`, "OCI state: invalid character"},
		"no ociVersion":      {`{"id":"c","pid":1}`, "ociVersion: missing"},
		"no pid":             {`{"ociVersion":"1.2.1","id":"c"}`, "pid: missing"},
		"pid 0":              {`{"ociVersion":"1.2.1","id":"c","pid":0}`, "pid: 0"},
		"negative pid":       {`{"ociVersion":"1.2.1","id":"c","pid":-4}`, "pid: -4"},
		"no id":              {`{"ociVersion":"1.2.1","pid":1}`, "id: missing"},
		"id with a slash":    {`{"ociVersion":"1.2.1","id":"../x","pid":1}`, `id: "../x"`},
		"pod UID with space": {`{"ociVersion":"1.2.1","id":"c","pid":1,"annotations":{"io.kubernetes.cri.sandbox-uid":"a b"}}`, "io.kubernetes.cri.sandbox-uid"},
		"trailing data":      {`{"ociVersion":"1.2.1","id":"c","pid":1} {}`, "data after the document"},
		"stray brace":        {`{"ociVersion":"1.2.1","id":"c","pid":1}}`, "data after the document"},
		"too large":          {`{"ociVersion":"1.2.1","id":"c","pid":1,"bundle":"` + strings.Repeat("x", MaxStateSize) + `"}`, "at most"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseState([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}
