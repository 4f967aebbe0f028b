package wire

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agent listens on a real SEQPACKET socket and answers each connection
// with handle.
func agent(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cni.sock")
	l, err := net.Listen(Network, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return path
}

func TestCall(t *testing.T) {
	var got *Request
	path := agent(t, func(c net.Conn) {
		r, err := ReadRequest(c)
		if err != nil {
			t.Errorf("agent: %v", err)
			return
		}
		got = r
		if err := WriteResponse(c, &Response{Outcome: OutcomeEnrolled, Reason: "pod-label"}); err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	resp, err := Call(path, validAdd(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != OutcomeEnrolled || resp.Reason != "pod-label" || resp.Version != Version {
		t.Fatalf("response %+v", resp)
	}
	if got == nil || got.Pod.UID != "5b1c" || len(got.IPs) != 2 {
		t.Fatalf("the agent read %+v", got)
	}
}

// TestCallFailures: every way the agent can fail to answer is an error
// that says so, within the deadline.
func TestCallFailures(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	for name, c := range map[string]struct {
		handle func(net.Conn)
		want   string
	}{
		"silent":     {func(net.Conn) { <-stuck }, "i/o timeout"},
		"hangs up":   {func(net.Conn) {}, "meshlet's answer"},
		"garbage":    {func(c net.Conn) { c.Write([]byte("OK")) }, "malformed"},
		"oversized":  {func(c net.Conn) { c.Write(bytes.Repeat([]byte(" "), MaxMessageSize+1)) }, "larger than"},
		"bad answer": {func(c net.Conn) { c.Write([]byte(`{"version":1,"outcome":"perhaps"}`)) }, `outcome: "perhaps"`},
	} {
		t.Run(name, func(t *testing.T) {
			path := agent(t, func(conn net.Conn) {
				// Read the request first: closing a socket with unread data
				// resets the connection, which would hide the answer.
				if _, err := ReadRequest(conn); err != nil {
					t.Errorf("agent: %v", err)
				}
				c.handle(conn)
			})
			start := time.Now()
			resp, err := Call(path, validAdd(), 200*time.Millisecond)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Call = %+v, %v; want an error containing %q", resp, err, c.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("Call took %v past a 200ms deadline", d)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "absent.sock")
	if _, err := Call(missing, validAdd(), time.Second); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Call to no agent: %v, want an error naming %s", err, missing)
	}
	bad := validAdd()
	bad.Netns = ""
	if _, err := Call(missing, bad, time.Second); err == nil || !strings.Contains(err.Error(), "request: netns") {
		t.Fatalf("Call with an invalid request: %v, want it refused before connecting", err)
	}
}

// TestWriteResponseRefusesInvalid: the agent cannot send what the plugin
// would refuse.
func TestWriteResponseRefusesInvalid(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := WriteResponse(a, &Response{Outcome: "done"}); err == nil || !strings.Contains(err.Error(), "outcome") {
		t.Fatalf("WriteResponse = %v, want the outcome refused", err)
	}
}
