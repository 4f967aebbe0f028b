package wire

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/meshlet/meshlet/internal/strictjson"
)

// Version is the protocol's version; both sides refuse another.
const Version = 1

// MaxMessageSize bounds one message either way.
const MaxMessageSize = 16 << 10

// Command is the CNI command the plugin forwards.
type Command string

// The commands the agent serves.
const (
	CommandAdd   Command = "ADD"
	CommandDel   Command = "DEL"
	CommandCheck Command = "CHECK"
)

// Pod names the pod of a sandbox, from the runtime's CNI_ARGS
// (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID).
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Request is one forwarded CNI call.
type Request struct {
	Version     int     `json:"version"`
	Command     Command `json:"command"`
	ContainerID string  `json:"containerID"`
	// Netns is the sandbox's network namespace path (CNI_NETNS); DEL may
	// come without one.
	Netns  string `json:"netns,omitempty"`
	IfName string `json:"ifName"`
	Pod    Pod    `json:"pod"`
	// IPs are the pod's addresses from the previous plugin's result.
	IPs []netip.Addr `json:"ips,omitempty"`
}

// Outcome is what the agent did with a request.
type Outcome string

// The outcomes.
const (
	// OutcomeEnrolled: the pod is in the mesh (ADD), or is as it should be
	// (CHECK), or was released (DEL).
	OutcomeEnrolled Outcome = "enrolled"
	// OutcomeSkipped: policy keeps the pod out of the mesh; nothing done.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeFailed: the pod must be meshed and is not.
	OutcomeFailed Outcome = "failed"
)

// Response is the agent's answer.
type Response struct {
	Version int     `json:"version"`
	Outcome Outcome `json:"outcome"`
	// Reason is the policy reason (enrolled, skipped) or the failed step.
	Reason string `json:"reason,omitempty"`
	// Message says what failed, for the CNI error the runtime logs.
	Message string `json:"message,omitempty"`
}

// FieldError is a refused field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Limits on a request's fields.
const (
	maxIDLen     = 256
	maxIfNameLen = 15 // IFNAMSIZ - 1
	maxIPs       = 16
	maxNameLen   = 253
)

// Validate reports every field that is wrong, each as a *FieldError.
func (r *Request) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if r.Version != Version {
		bad("version", "%d, want %d", r.Version, Version)
	}
	switch r.Command {
	case CommandAdd, CommandDel, CommandCheck:
	default:
		bad("command", "%q, want ADD, DEL or CHECK", r.Command)
	}
	if r.ContainerID == "" || len(r.ContainerID) > maxIDLen {
		bad("containerID", "must have 1 to %d characters", maxIDLen)
	}
	if r.IfName == "" || len(r.IfName) > maxIfNameLen || strings.ContainsAny(r.IfName, "/ ") {
		bad("ifName", "%q is not an interface name", r.IfName)
	}
	needsPod := r.Command == CommandAdd || r.Command == CommandCheck
	switch {
	case r.Netns == "" && needsPod:
		bad("netns", "required for %s", r.Command)
	case r.Netns != "" && (!filepath.IsAbs(r.Netns) || filepath.Clean(r.Netns) != r.Netns):
		bad("netns", "%q is not a clean absolute path", r.Netns)
	}
	for field, v := range map[string]string{"pod.namespace": r.Pod.Namespace, "pod.name": r.Pod.Name, "pod.uid": r.Pod.UID} {
		if (v == "" && needsPod) || len(v) > maxNameLen {
			bad(field, "must have 1 to %d characters (the runtime's K8S_POD_* CNI_ARGS)", maxNameLen)
		}
	}
	if len(r.IPs) > maxIPs {
		bad("ips", "%d addresses, at most %d", len(r.IPs), maxIPs)
	}
	for i, ip := range r.IPs {
		if !ip.IsValid() || ip.Zone() != "" {
			bad(fmt.Sprintf("ips[%d]", i), "%q is not a pod address", ip)
		}
	}
	return errors.Join(errs...)
}

// Validate reports a response that breaks the protocol.
func (r *Response) Validate() error {
	var errs []error
	if r.Version != Version {
		errs = append(errs, &FieldError{Field: "version", Reason: fmt.Sprintf("%d, want %d", r.Version, Version)})
	}
	switch r.Outcome {
	case OutcomeEnrolled, OutcomeSkipped, OutcomeFailed:
	default:
		errs = append(errs, &FieldError{Field: "outcome", Reason: fmt.Sprintf("%q, want enrolled, skipped or failed", r.Outcome)})
	}
	return errors.Join(errs...)
}

// DecodeRequest reads a request strictly and validates it.
func DecodeRequest(b []byte) (*Request, error) {
	var r Request
	if err := decodeStrict(b, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeResponse reads a response strictly and validates it.
func DecodeResponse(b []byte) (*Response, error) {
	var r Response
	if err := decodeStrict(b, &r); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// decodeStrict decodes one JSON object into v: no unknown field, no field
// twice, nothing after it.
func decodeStrict(b []byte, v any) error {
	if len(b) > MaxMessageSize {
		return fmt.Errorf("message of %d bytes, at most %d", len(b), MaxMessageSize)
	}
	err := strictjson.Decode(b, v)
	var repeated *strictjson.RepeatedFieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &repeated):
		return &FieldError{Field: repeated.Field, Reason: "given twice"}
	case errors.Is(err, strictjson.ErrTrailingData):
		return errors.New("malformed message: data after the JSON object")
	}
	return fmt.Errorf("malformed message: %w", err)
}
