package wire

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/meshlet/meshlet/internal/seqpacket"
)

// Network is the socket type: one message per request and per response,
// so neither side needs framing.
const Network = seqpacket.Network

// Call sends req to the agent at socketPath and returns its response,
// all within timeout. An error means the agent did not answer (absent,
// stuck, or broke the protocol); an answer of OutcomeFailed is a response,
// not an error.
func Call(socketPath string, req *Request, timeout time.Duration) (*Response, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := seqpacket.Call(socketPath, b, MaxMessageSize, timeout)
	if err != nil {
		return nil, err
	}
	resp, err := DecodeResponse(msg)
	if err != nil {
		return nil, fmt.Errorf("meshlet's answer: %w", err)
	}
	return resp, nil
}

// ReadRequest reads and decodes one request from a connection the agent
// accepted.
func ReadRequest(conn net.Conn) (*Request, error) {
	msg, err := seqpacket.Read(conn, MaxMessageSize)
	if err != nil {
		return nil, err
	}
	return DecodeRequest(msg)
}

// WriteResponse sends the agent's answer.
func WriteResponse(conn net.Conn, resp *Response) error {
	resp.Version = Version
	if err := resp.Validate(); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	if len(b) > MaxMessageSize {
		return fmt.Errorf("response of %d bytes, at most %d", len(b), MaxMessageSize)
	}
	_, err = conn.Write(b)
	return err
}
