package gate

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// FuzzParseState: the hook's parser of the runtime's OCI state never
// panics, and what it accepts has a process and valid ids.
func FuzzParseState(f *testing.F) {
	if b, err := os.ReadFile("testdata/containerd-state.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"ociVersion":"1.0.2","id":"c1","pid":7,"annotations":{"io.kubernetes.cri-o.SandboxID":"s1"}}`))
	f.Add([]byte(`{"ociVersion":"1","id":"c","pid":1e3}`))
	f.Add([]byte(`{"ociVersion":"1","id":"c","pid":null}`))
	f.Add([]byte(`{"ociVersion":"1","id":"c","pid":1,"annotations":{"io.kubernetes.cri.sandbox-uid":"\u0000"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseState(b)
		if err != nil {
			return
		}
		if st.Pid <= 0 {
			t.Fatalf("accepted pid %d", st.Pid)
		}
		req := Request{Version: Version, NetnsInode: 1, ContainerID: st.ID, PodUID: st.PodUID, SandboxID: st.SandboxID}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted a state whose request is invalid: %v", err)
		}
	})
}

// FuzzDecodeRequest: meshlet's parser of what the hook sends never
// panics, and what it accepts is valid and survives a round trip.
func FuzzDecodeRequest(f *testing.F) {
	b, _ := json.Marshal(Request{Version: Version, NetnsInode: 4026532281, ContainerID: "4f1e0c", PodUID: "6c1f3a52-8d0e-4c7b-9f2a-1e5d7b3c9a40", SandboxID: "9a8b"})
	f.Add(b)
	f.Add([]byte(`{"version":1,"netnsInode":1,"containerID":"c","containerID":"d"}`))
	f.Add([]byte(`{"version":1,"netnsInode":1,"containerID":"c","podUID":"web","podUID":""}`))
	f.Add([]byte(`{"version":1,"netnsInode":1,"containerID":"c"}}`))
	f.Add([]byte(`{"version":1,"netnsInode":18446744073709551616,"containerID":"c"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeRequest(out)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, r)
		}
	})
}

// FuzzDecodeResponse: the hook's parser of meshlet's answer never panics
// and accepts only valid answers.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"version":1,"allow":true}`))
	f.Add([]byte(`{"version":1,"allow":false,"reason":"pod apps/web is not in the mesh: failed (netns)"}`))
	f.Add([]byte(`{"version":1,"allow":false,"reason":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid answer: %v", err)
		}
	})
}
