package gate

import (
	"net"
	"strings"
	"testing"
)

// TestDecodeRequestRefusals: a request that is not exactly what the hook
// sends is refused, naming the field.
func TestDecodeRequestRefusals(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"old version":       {`{"version":0,"netnsInode":1,"containerID":"c"}`, "version: 0"},
		"no inode":          {`{"version":1,"containerID":"c"}`, "netnsInode: missing"},
		"no container":      {`{"version":1,"netnsInode":1}`, "containerID: missing"},
		"unknown field":     {`{"version":1,"netnsInode":1,"containerID":"c","pid":3}`, `unknown field "pid"`},
		"pod UID traversal": {`{"version":1,"netnsInode":1,"containerID":"c","podUID":"../../etc"}`, "podUID"},
		"long sandbox":      {`{"version":1,"netnsInode":1,"containerID":"c","sandboxID":"` + strings.Repeat("a", 129) + `"}`, "sandboxID: 129 characters"},
		"two documents":     {`{"version":1,"netnsInode":1,"containerID":"c"}{}`, "data after the JSON value"},
		"stray brace":       {`{"version":1,"netnsInode":1,"containerID":"c"}}`, "data after the JSON value"},
		"pod UID twice":     {`{"version":1,"netnsInode":1,"containerID":"c","podUID":"web","podUID":""}`, "podUID: given twice"},
		"inode as string":   {`{"version":1,"netnsInode":"1","containerID":"c"}`, "netnsInode"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestDecodeResponseRefusals: a refusal without a reason, or an answer of
// another version, is not an answer: the hook refuses the container.
func TestDecodeResponseRefusals(t *testing.T) {
	for in, want := range map[string]string{
		`{"version":1,"allow":false}`:      "a refusal must say why",
		`{"version":2,"allow":true}`:       "version: 2",
		`{"version":1,"allow":"yes"}`:      "allow",
		`{"version":1,"allow":true,"x":1}`: `unknown field "x"`,
	} {
		if _, err := DecodeResponse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one containing %q", in, err, want)
		}
	}
	if r, err := DecodeResponse([]byte(`{"version":1,"allow":true}`)); err != nil || !r.Allow {
		t.Fatalf("allow: %+v, %v", r, err)
	}
}

// TestLongRefusalReachesTheHook: a refusal whose reason escapes to more
// than a message holds is shortened, not dropped (a dropped answer reads
// as "meshlet did not answer").
func TestLongRefusalReachesTheHook(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() { done <- WriteResponse(a, &Response{Reason: strings.Repeat("<\u0001>", 400)}) }()
	buf := make([]byte, MaxMessageSize+1)
	n, err := b.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	resp, err := DecodeResponse(buf[:n])
	if err != nil || resp.Allow || resp.Reason == "" {
		t.Fatalf("answer %+v, %v; want a refusal with a reason", resp, err)
	}
}
