//go:build !linux

package redirect

import (
	"context"
	"errors"
	"net/netip"

	"github.com/meshlet/meshlet/agent/enroll"
)

var errUnsupported = errors.New("traffic redirection is only supported on Linux")

// Redirector is only implemented on Linux.
type Redirector struct{}

var _ enroll.Redirector = (*Redirector)(nil)

// New is only implemented on Linux.
func New(Config) (*Redirector, error) { return nil, errUnsupported }

// Check is only implemented on Linux.
func Check(Config) error { return errUnsupported }

// Apply is only implemented on Linux.
func (*Redirector) Apply(context.Context, *enroll.Workload, *enroll.Record) (string, error) {
	return "", errUnsupported
}

// Account is only implemented on Linux.
func (*Redirector) Account(*enroll.Record) (string, error) { return "", errUnsupported }

// SetIPv6 is only implemented on Linux.
func (*Redirector) SetIPv6(bool) {}

// Remove is only implemented on Linux.
func (*Redirector) Remove(context.Context, *enroll.Workload, enroll.RemoveScope) error {
	return errUnsupported
}

// Close is only implemented on Linux.
func (*Redirector) Close() error { return errUnsupported }

// RetainNodeState is only implemented on Linux.
func (*Redirector) RetainNodeState([]netip.Addr) error { return errUnsupported }

// UninstallNode is only implemented on Linux.
func (*Redirector) UninstallNode() error { return errUnsupported }

// HasIstioRules is only implemented on Linux.
func HasIstioRules(string) (bool, error) { return false, errUnsupported }

// HandBack is only implemented on Linux.
func (*Redirector) HandBack(context.Context, *enroll.Workload) error { return errUnsupported }

// Settle is only implemented on Linux.
func (*Redirector) Settle() {}
