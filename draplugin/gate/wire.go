package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/meshlet/meshlet/internal/seqpacket"
	"github.com/meshlet/meshlet/internal/strictjson"
)

// Network is the socket type: one message per request and per answer.
const Network = seqpacket.Network

// Version is the wire version both sides speak.
const Version = 1

// MaxMessageSize bounds a request and an answer.
const MaxMessageSize = 2048

// maxIDLen bounds the identifiers a request carries (container ids are 64
// hex characters, pod UIDs 36).
const maxIDLen = 128

// maxReasonLen bounds an answer's reason.
const maxReasonLen = 1024

// Request asks whether a container may start: whether a pod in the
// network namespace with inode NetnsInode is enrolled. PodUID and
// SandboxID are what the runtime's annotations say about the container's
// pod, when it says it; the namespace decides.
type Request struct {
	Version     int    `json:"version"`
	NetnsInode  uint64 `json:"netnsInode"`
	ContainerID string `json:"containerID"`
	PodUID      string `json:"podUID,omitempty"`
	SandboxID   string `json:"sandboxID,omitempty"`
}

// Response is meshlet's answer. Allow false refuses the container; Reason
// says why (it ends up in the pod's events).
type Response struct {
	Version int    `json:"version"`
	Allow   bool   `json:"allow"`
	Reason  string `json:"reason,omitempty"`
}

// Validate reports the first field that is not acceptable.
func (r *Request) Validate() error {
	if r.Version != Version {
		return fmt.Errorf("version: %d, want %d", r.Version, Version)
	}
	if r.NetnsInode == 0 {
		return errors.New("netnsInode: missing")
	}
	if err := checkID("containerID", r.ContainerID, true); err != nil {
		return err
	}
	if err := checkID("podUID", r.PodUID, false); err != nil {
		return err
	}
	return checkID("sandboxID", r.SandboxID, false)
}

// Validate reports the first field that is not acceptable.
func (r *Response) Validate() error {
	if r.Version != Version {
		return fmt.Errorf("version: %d, want %d", r.Version, Version)
	}
	if len(r.Reason) > maxReasonLen {
		return fmt.Errorf("reason: %d bytes, at most %d", len(r.Reason), maxReasonLen)
	}
	if !r.Allow && r.Reason == "" {
		return errors.New("reason: a refusal must say why")
	}
	return nil
}

// checkID accepts what runtimes use as ids and UIDs: letters, digits,
// '-', '_' and '.'.
func checkID(field, v string, required bool) error {
	if v == "" {
		if required {
			return fmt.Errorf("%s: missing", field)
		}
		return nil
	}
	if len(v) > maxIDLen {
		return fmt.Errorf("%s: %d characters, at most %d", field, len(v), maxIDLen)
	}
	for _, c := range v {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%s: %q has a character other than letters, digits, '-', '_' and '.'", field, v)
		}
	}
	return nil
}

// DecodeRequest parses and validates a request; an unknown field, a field
// given twice or data after the message is refused.
func DecodeRequest(b []byte) (*Request, error) {
	var r Request
	if err := decodeStrict(b, &r); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	return &r, nil
}

// DecodeResponse parses and validates an answer.
func DecodeResponse(b []byte) (*Response, error) {
	var r Response
	if err := decodeStrict(b, &r); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	return &r, nil
}

func decodeStrict(b []byte, v any) error {
	if len(b) > MaxMessageSize {
		return fmt.Errorf("%d bytes, at most %d", len(b), MaxMessageSize)
	}
	return strictjson.Decode(b, v)
}

// Ask sends req to meshlet at socketPath and returns its answer, all
// within timeout. An error means meshlet did not answer (absent, stuck,
// or broke the protocol).
func Ask(socketPath string, req *Request, timeout time.Duration) (*Response, error) {
	req.Version = Version
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	msg, err := seqpacket.Call(socketPath, b, MaxMessageSize, timeout)
	if err != nil {
		return nil, err
	}
	return DecodeResponse(msg)
}

// WriteResponse sends meshlet's answer. A reason too long for one message
// (escaping can double it) is shortened: a refusal must reach the hook,
// or it reports that meshlet did not answer.
func WriteResponse(conn net.Conn, resp *Response) error {
	resp.Version = Version
	if len(resp.Reason) > maxReasonLen {
		resp.Reason = resp.Reason[:maxReasonLen]
	}
	for {
		resp.Reason = strings.ToValidUTF8(resp.Reason, "")
		if err := resp.Validate(); err != nil {
			return fmt.Errorf("answer: %w", err)
		}
		b, err := json.Marshal(resp)
		if err != nil {
			return fmt.Errorf("answer: %w", err)
		}
		if len(b) <= MaxMessageSize {
			_, err = conn.Write(b)
			return err
		}
		resp.Reason = resp.Reason[:len(resp.Reason)/2] + "…"
	}
}

// ReadMessage reads one message, refusing one larger than MaxMessageSize.
func ReadMessage(conn net.Conn) ([]byte, error) { return seqpacket.Read(conn, MaxMessageSize) }
