package zds

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// MaxMessageSize bounds one datagram: ztunnel reads into a 1024-byte
// buffer, so every message must be strictly smaller.
const MaxMessageSize = 1024

// oobSize leaves room to notice (and close) a few fds a peer should not
// have sent.
var oobSize = unix.CmsgSpace(4 * 4)

// ProtocolError is a datagram that breaks the protocol. The connection it
// arrived on is closed.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "zds protocol error: " + e.Reason }

func protocolErrorf(format string, args ...any) error {
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}

// ReadMessage reads one datagram into m and returns the fds that came with
// it. It rejects truncated or oversized datagrams and unparsable payloads;
// fds that arrive with a rejected datagram are closed.
//
// A zero-length datagram reads as io.EOF: Go takes it for the end of a
// SEQPACKET stream.
func ReadMessage(c *net.UnixConn, m proto.Message) ([]int, error) {
	buf := make([]byte, MaxMessageSize)
	oob := make([]byte, oobSize)
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		fds = parseRights(oob[:oobn])
	}
	if err == nil {
		err = checkDatagram(buf[:n], flags, m)
	}
	if err != nil {
		closeAll(fds)
		return nil, err
	}
	return fds, nil
}

// checkDatagram parses one complete datagram into m.
func checkDatagram(b []byte, flags int, m proto.Message) error {
	switch {
	case flags&unix.MSG_TRUNC != 0 || len(b) >= MaxMessageSize:
		return protocolErrorf("datagram of %d bytes or more exceeds the %d-byte limit", len(b), MaxMessageSize-1)
	case flags&unix.MSG_CTRUNC != 0:
		return protocolErrorf("control data truncated (too many fds)")
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return protocolErrorf("unparsable %T: %v", m, err)
	}
	return nil
}

// WriteMessage sends m as one datagram, with fd attached when fd >= 0.
func WriteMessage(c *net.UnixConn, m proto.Message, fd int) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("marshal %T: %w", m, err)
	}
	if len(b) >= MaxMessageSize {
		return fmt.Errorf("%T is %d bytes, over the %d-byte datagram limit", m, len(b), MaxMessageSize-1)
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	n, oobn, err := c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if n != len(b) || oobn != len(oob) {
		return fmt.Errorf("short write: %d/%d bytes, %d/%d control bytes", n, len(b), oobn, len(oob))
	}
	return nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// errConnClosed is returned for requests on a connection that has closed.
var errConnClosed = errors.New("ztunnel connection closed")
