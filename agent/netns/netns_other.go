//go:build !linux

package netns

import (
	"errors"
	"net/netip"
)

var errUnsupported = errors.New("network namespaces are only supported on Linux")

// Open is only implemented on Linux.
func Open(path string) (*Handle, error) { return nil, errUnsupported }

// Identify is only implemented on Linux.
func Identify(fd int) (uint64, error) { return 0, errUnsupported }

// Close is only implemented on Linux.
func (h *Handle) Close() error { return errUnsupported }

// RunIn is only implemented on Linux.
func RunIn(fd int, fn func() error) error { return errUnsupported }

// HoldsAddrs is only implemented on Linux.
func (h *Handle) HoldsAddrs(want []netip.Addr) error { return errUnsupported }

// PodAddrs is only implemented on Linux.
func (h *Handle) PodAddrs() ([]netip.Addr, error) { return nil, errUnsupported }

// Cookie is only implemented on Linux.
func (h *Handle) Cookie() (uint64, error) { return 0, errUnsupported }
