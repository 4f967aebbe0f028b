package unixsock

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerIsRoot checks the connecting process's credentials (SO_PEERCRED,
// taken by the kernel at connect): meshlet's sockets serve root only (the
// runtime runs CNI plugins as root, ztunnel runs as root), whatever the
// socket file's mode lets in.
func PeerIsRoot(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("peer credentials: %w", serr)
	}
	if cred.Uid != 0 {
		return fmt.Errorf("peer pid %d runs as uid %d, not root", cred.Pid, cred.Uid)
	}
	return nil
}
