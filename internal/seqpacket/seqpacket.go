// Package seqpacket is the framing meshlet-cni and meshlet-gate speak to
// meshlet: one request and one answer, each a single message on a Unix
// SEQPACKET socket, bounded in size, the whole call bounded in time. The
// socket keeps message boundaries, so neither side needs a length prefix.
// Standard library only: both small binaries link it.
package seqpacket

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Network is the socket type.
const Network = "unixpacket"

// Call sends req to meshlet at socketPath and returns its answer, at most
// maxSize bytes, all within timeout. An error means meshlet did not answer
// (absent, stuck, or broke the framing).
func Call(socketPath string, req []byte, maxSize int, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	conn, err := net.DialTimeout(Network, socketPath, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to meshlet at %s: %w", socketPath, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("connection to meshlet: %w", err)
	}
	if _, err := conn.Write(req); err != nil {
		return nil, fmt.Errorf("send to meshlet: %w", err)
	}
	answer, err := Read(conn, maxSize)
	if err != nil {
		return nil, fmt.Errorf("meshlet's answer: %w", err)
	}
	return answer, nil
}

// Read reads one message, refusing one larger than maxSize: a SEQPACKET
// read truncates a longer message silently, and the extra byte read shows
// it.
func Read(conn net.Conn, maxSize int) ([]byte, error) {
	buf := make([]byte, maxSize+1)
	n, err := conn.Read(buf)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("connection closed without a message")
	}
	if n > maxSize {
		return nil, fmt.Errorf("message larger than %d bytes", maxSize)
	}
	return buf[:n], nil
}
