// Package unixsock listens on the Unix sockets meshlet serves (ztunnel's
// ZDS socket, the CNI plugin's socket, the local debug socket): directory created (and
// removed again if listening fails), a stale socket replaced, a live one
// or anything else at the path refused, the mode set, the file unlinked
// on close.
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ErrInUse: a process listens on the socket path.
var ErrInUse = errors.New("socket in use")

// ListenPacket listens on a SEQPACKET socket at path with the given mode;
// missing parent directories are created with dirPerm.
func ListenPacket(path string, dirPerm, mode fs.FileMode) (*net.UnixListener, error) {
	return listen("unixpacket", path, dirPerm, mode)
}

// ListenStream is ListenPacket for a stream socket (HTTP).
func ListenStream(path string, dirPerm, mode fs.FileMode) (*net.UnixListener, error) {
	return listen("unix", path, dirPerm, mode)
}

func listen(network, path string, dirPerm, mode fs.FileMode) (_ *net.UnixListener, err error) {
	undo, err := mkdirAll(filepath.Dir(path), dirPerm)
	if err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	if err := removeStaleSocket(network, path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// removeStaleSocket removes a leftover socket file; a socket something
// still answers on (another meshlet given the same path) and anything
// else at the path are left alone and reported.
func removeStaleSocket(network, path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket (%s); refusing to remove it", path, fi.Mode().Type())
	}
	if c, err := net.DialTimeout(network, path, time.Second); err == nil {
		_ = c.Close()
		return fmt.Errorf("%w: %s: another process (another meshlet?) serves it", ErrInUse, path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
