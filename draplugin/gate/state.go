package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxStateSize bounds the OCI state the hook reads: it carries every
// annotation of the container, which the API server caps at 256 KiB.
const MaxStateSize = 1 << 20

// Annotations the runtimes put on a container that name its pod.
const (
	// containerd's CRI plugin.
	annotationSandboxID  = "io.kubernetes.cri.sandbox-id"
	annotationSandboxUID = "io.kubernetes.cri.sandbox-uid"
	// CRI-O.
	annotationCRIOSandboxID = "io.kubernetes.cri-o.SandboxID"
)

// State is what the hook needs of the container's OCI state.
type State struct {
	// ID is the container's id.
	ID string
	// Pid is the container's init process, created but not yet started:
	// it is already in the pod's network namespace.
	Pid int
	// PodUID and SandboxID are from the runtime's annotations; empty when
	// the runtime does not set them.
	PodUID, SandboxID string
}

// ociState is the runtime-spec state document (the fields the hook reads).
type ociState struct {
	OCIVersion  string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Pid         *int              `json:"pid"`
	Annotations map[string]string `json:"annotations"`
}

// ParseState reads the OCI state the runtime passes on the hook's stdin.
// Each refusal names the field.
func ParseState(b []byte) (State, error) {
	if len(b) > MaxStateSize {
		return State{}, fmt.Errorf("OCI state: %d bytes, at most %d", len(b), MaxStateSize)
	}
	var s ociState
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&s); err != nil {
		return State{}, fmt.Errorf("OCI state: %w", err)
	}
	// Unknown fields are the runtime's to add; data after the document is
	// not. (Not dec.More(): it is false before a stray '}'.)
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return State{}, errors.New("OCI state: data after the document")
	}
	switch {
	case s.OCIVersion == "":
		return State{}, errors.New("OCI state: ociVersion: missing")
	case s.Pid == nil:
		return State{}, errors.New("OCI state: pid: missing (is this a createRuntime hook?)")
	case *s.Pid <= 0:
		return State{}, fmt.Errorf("OCI state: pid: %d, want the container's process", *s.Pid)
	}
	if err := checkID("id", s.ID, true); err != nil {
		return State{}, fmt.Errorf("OCI state: %w", err)
	}
	st := State{ID: s.ID, Pid: *s.Pid, PodUID: s.Annotations[annotationSandboxUID], SandboxID: s.Annotations[annotationSandboxID]}
	if st.SandboxID == "" {
		st.SandboxID = s.Annotations[annotationCRIOSandboxID]
	}
	if err := checkID("annotations["+annotationSandboxUID+"]", st.PodUID, false); err != nil {
		return State{}, fmt.Errorf("OCI state: %w", err)
	}
	if err := checkID("annotations[sandbox id]", st.SandboxID, false); err != nil {
		return State{}, fmt.Errorf("OCI state: %w", err)
	}
	return st, nil
}
