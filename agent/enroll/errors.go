package enroll

import (
	"errors"
	"fmt"
)

// Step names the enrollment step that failed. Steps are stable strings:
// they label failure metrics and appear in pod events.
type Step string

const (
	StepResolve  Step = "resolve"
	StepNetns    Step = "netns"
	StepRedirect Step = "redirect"
	StepProxy    Step = "ztunnel"
)

// Error is an enrollment failure: which pod, which step, why.
type Error struct {
	UID  string
	Step Step
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("enroll pod %s: %s: %v", e.UID, e.Step, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// FailedStep returns the step at which err says enrollment failed, or "" if
// err is not an enrollment error.
func FailedStep(err error) Step {
	var e *Error
	if errors.As(err, &e) {
		return e.Step
	}
	return ""
}

// ErrNoNetns is the cause when a pod that must be enrolled has no network
// namespace path.
var ErrNoNetns = errors.New("pod has no network namespace path")

// ErrNodeNetns is the cause a NetnsOpener gives for a pod whose namespace
// is the node's own. Rules there would redirect the node's traffic; such a
// pod shares the host's network, and the core decides it as one.
var ErrNodeNetns = errors.New("it is the node's own network namespace: a pod's rules there would redirect the node's traffic")

// ErrOutOfTime is the cause when the caller's deadline passed before a step
// could start: the step was not attempted.
var ErrOutOfTime = errors.New("out of time before this step")
