package zds

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/agent/zds/zdspb"
)

// FuzzPeerMessage: whatever datagram a ztunnel peer sends (any bytes, with
// up to six fds attached), meshlet's reading of it never panics or leaks
// an fd; it accepts a hello only when it is a V1 ZdsHello without fds,
// and a datagram at or over the size limit never. The datagrams travel a
// real SEQPACKET socket pair with real fds, as from ztunnel.
func FuzzPeerMessage(f *testing.F) {
	hello, _ := proto.Marshal(&zdspb.ZdsHello{Version: zdspb.Version_V1})
	ack, _ := proto.Marshal(&zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{}}})
	nack, _ := proto.Marshal(&zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{Error: "no such netns"}}})
	f.Add(hello, uint8(0), true)
	f.Add(hello, uint8(1), true)
	f.Add([]byte{0x08, 0x02}, uint8(0), true) // version 2
	f.Add([]byte{0x08}, uint8(0), true)       // truncated varint
	f.Add(ack, uint8(0), false)
	f.Add(nack, uint8(2), false)
	f.Add(make([]byte, MaxMessageSize), uint8(0), false)
	f.Add(make([]byte, MaxMessageSize-1), uint8(3), false)
	f.Add(ack, uint8(5), false)
	f.Add([]byte{}, uint8(0), true)

	devNull, err := os.Open(os.DevNull)
	if err != nil {
		f.Fatal(err)
	}
	defer devNull.Close()
	// One pair for every input: each sends and reads exactly one datagram.
	ours, peer := socketPair(f)
	defer ours.Close()
	defer peer.Close()
	f.Fuzz(func(t *testing.T, data []byte, nfds uint8, asHello bool) {
		checkPeerMessage(t, ours, peer, devNull, data, nfds, asHello)
	})
}

// checkPeerMessage sends data with nfds copies of fd from peer and reads
// it on ours as a hello or a response.
func checkPeerMessage(t *testing.T, ours, peer *net.UnixConn, fd *os.File, data []byte, nfds uint8, asHello bool) {
	if err := ours.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	nfds %= 7 // over 4 does not fit meshlet's control buffer
	if len(data) > MaxMessageSize+16 {
		data = data[:MaxMessageSize+16] // past the limit is past the limit
	}
	if len(data) == 0 && nfds > 0 {
		// Go's WriteMsgUnix sends one zero byte for an empty payload
		// with control data on a SEQPACKET socket; say so.
		data = []byte{0}
	}
	var oob []byte
	if nfds > 0 {
		fds := make([]int, nfds)
		for i := range fds {
			fds[i] = int(fd.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := peer.WriteMsgUnix(data, oob, nil); err != nil {
		t.Fatalf("send the datagram: %v", err)
	}
	before := openFdCount(t)

	var msgErr error
	var got []int
	if asHello {
		c := newConn(ours, 1, time.Second, logr.Discard())
		msgErr = c.readHello(time.Second)
		var h zdspb.ZdsHello
		okHello := len(data) < MaxMessageSize && nfds == 0 && proto.Unmarshal(data, &h) == nil && h.GetVersion() == zdspb.Version_V1
		if (msgErr == nil) != okHello {
			t.Fatalf("hello %x with %d fds: readHello = %v, want accepted %t", data, nfds, msgErr, okHello)
		}
	} else {
		var resp zdspb.WorkloadResponse
		got, msgErr = ReadMessage(ours, &resp)
		if msgErr == nil && (nfds > 4 || len(got) != int(nfds)) {
			t.Fatalf("accepted a datagram with %d fds, returned %d", nfds, len(got))
		}
		closeAll(got)
	}
	if len(data) >= MaxMessageSize && msgErr == nil {
		t.Fatalf("accepted a %d-byte datagram; the limit is %d", len(data), MaxMessageSize-1)
	}
	var pe *ProtocolError
	switch {
	case len(data) == 0:
		// Go reads a zero-length SEQPACKET datagram as the end of
		// the stream: the connection closes all the same.
		if !errors.Is(msgErr, io.EOF) {
			t.Fatalf("an empty datagram gave %v, want EOF", msgErr)
		}
	case msgErr != nil && !errors.As(msgErr, &pe):
		t.Fatalf("a bad datagram gave %v, want a protocol error", msgErr)
	}
	// Every fd that arrived was closed: the accepted ones above,
	// the rejected ones by meshlet. Fewer is not a leak: an earlier test's
	// server may close its connection meanwhile.
	if after := openFdCount(t); after > before {
		t.Fatalf("%d fds open after reading, %d before: the datagram's fds leaked", after, before)
	}
}

// socketPair is a connected SEQPACKET pair, as ztunnel's connection.
func socketPair(t testing.TB) (ours, peer *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "zds")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	return conns[0], conns[1]
}

// openFdCount counts this process's open file descriptors.
func openFdCount(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
