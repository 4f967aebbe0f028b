package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// Network is the socket type: one message per request and per response,
// so neither side needs framing.
const Network = "unixpacket"

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
	deadline := time.Now().Add(timeout)
	conn, err := net.DialTimeout(Network, socketPath, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to meshlet at %s: %w", socketPath, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if _, err := conn.Write(b); err != nil {
		return nil, fmt.Errorf("send to meshlet: %w", err)
	}
	msg, err := readMessage(conn)
	if err != nil {
		return nil, fmt.Errorf("meshlet's answer: %w", err)
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
	msg, err := readMessage(conn)
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

// readMessage reads one message, refusing one larger than MaxMessageSize
// (a SEQPACKET read truncates silently; the extra byte shows it).
func readMessage(conn net.Conn) ([]byte, error) {
	buf := make([]byte, MaxMessageSize+1)
	n, err := conn.Read(buf)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("connection closed without a message")
	}
	if n > MaxMessageSize {
		return nil, fmt.Errorf("message larger than %d bytes", MaxMessageSize)
	}
	return buf[:n], nil
}
