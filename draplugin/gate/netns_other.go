//go:build !linux

package gate

import "errors"

// NetnsInode is the inode of the network namespace process pid is in:
// Linux only.
func NetnsInode(pid int) (uint64, error) {
	return 0, errors.New("network namespaces are Linux only")
}
