package gate

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// nsfsMagic is the filesystem type of namespace files (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// NetnsInode is the inode of the network namespace process pid is in.
func NetnsInode(pid int) (uint64, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	if fs.Type != nsfsMagic {
		return 0, fmt.Errorf("%s is not a namespace file", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat %s: no inode", path)
	}
	return st.Ino, nil
}
