package server

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerIsRoot checks the connecting process's credentials (SO_PEERCRED):
// only root, as the runtime runs CNI plugins, may ask for enrollments.
func peerIsRoot(conn *net.UnixConn) error {
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
