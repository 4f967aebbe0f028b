//go:build !linux

package netns

import "errors"

var errUnsupported = errors.New("network namespaces are only supported on Linux")

// Open is only implemented on Linux.
func Open(path string) (*Handle, error) { return nil, errUnsupported }

// FromFd is only implemented on Linux.
func FromFd(fd int, path string) (*Handle, error) { return nil, errUnsupported }

// Identify is only implemented on Linux.
func Identify(fd int) (uint64, error) { return 0, errUnsupported }

// Close is only implemented on Linux.
func (h *Handle) Close() error { return errUnsupported }

// Dup is only implemented on Linux.
func (h *Handle) Dup() (*Handle, error) { return nil, errUnsupported }

// Do is only implemented on Linux.
func (h *Handle) Do(fn func() error) error { return errUnsupported }

// RunIn is only implemented on Linux.
func RunIn(fd uintptr, fn func() error) error { return errUnsupported }
