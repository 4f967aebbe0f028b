package zds_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/zds"
)

// TestListenWhenFreeWaitsForTheOtherAgent: while another agent (istio-cni's,
// being replaced) serves ztunnel's socket, ListenWhenFree leaves its live
// socket alone and waits; once that agent is gone (its socket unlinked, or
// left behind stale) it serves the path.
func TestListenWhenFreeWaitsForTheOtherAgent(t *testing.T) {
	for _, unlinks := range []bool{true, false} {
		name := map[bool]string{true: "the other agent removes its socket", false: "the other agent leaves its socket behind"}[unlinks]
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ztunnel.sock")
			other, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			other.SetUnlinkOnClose(unlinks)
			waiting := make(chan struct{})
			result := make(chan error, 1)
			var srv *zds.Server
			go func() {
				s, err := zds.ListenWhenFree(context.Background(), zds.Config{SocketPath: path}, func() { close(waiting) })
				srv = s
				result <- err
			}()
			select {
			case <-waiting:
			case err := <-result:
				t.Fatalf("ListenWhenFree returned (%v) while another agent serves %s", err, path)
			case <-time.After(10 * time.Second):
				t.Fatal("ListenWhenFree neither waited nor returned")
			}
			// The other agent's socket is still its own: a client reaches it.
			c, err := net.Dial("unixpacket", path)
			if err != nil {
				t.Fatalf("the other agent's socket was taken from it: %v", err)
			}
			c.Close()
			if _, err := other.Accept(); err != nil {
				t.Fatalf("the other agent's listener: %v", err)
			}
			select {
			case err := <-result:
				t.Fatalf("ListenWhenFree returned (%v) while another agent serves %s", err, path)
			default:
			}
			other.Close()
			select {
			case err := <-result:
				if err != nil {
					t.Fatalf("ListenWhenFree after the other agent left: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ListenWhenFree did not take the socket once the other agent left")
			}
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = srv.Serve(ctx) }()
			c, err = net.Dial("unixpacket", path)
			if err != nil {
				t.Fatalf("meshlet does not serve %s: %v", path, err)
			}
			c.Close()
		})
	}
}

// TestListenWhenFreeStopsWithItsContext: a wait that is called off says
// which socket it waited for.
func TestListenWhenFreeStopsWithItsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ztunnel.sock")
	other, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	_, err = zds.ListenWhenFree(ctx, zds.Config{SocketPath: path}, func() { cancel(errors.New("meshlet stopping")) })
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "meshlet stopping") {
		t.Fatalf("ListenWhenFree called off: %v, want an error naming %s and the cause", err, path)
	}
}
