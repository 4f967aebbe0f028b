package debug

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// NetnsDirs are where runtimes bind-mount pods' network namespaces
// (containerd and CRI-O: /var/run/netns, a link to /run/netns).
var NetnsDirs = []string{"/run/netns", "/var/run/netns"}

// NetnsPaths finds a path that nsenter --net= takes for each network
// namespace inode: its bind mount in dirs, else /proc/<pid>/ns/net of a
// process in it that this meshlet sees (outside a container: the pod's
// pause process). An inode it cannot find is left out.
func NetnsPaths(dirs []string) func(inodes []uint64) map[uint64]string {
	return func(inodes []uint64) map[uint64]string {
		want := make(map[uint64]bool, len(inodes))
		for _, ino := range inodes {
			want[ino] = true
		}
		found := make(map[uint64]string, len(inodes))
		take := func(path string, ino uint64) {
			if want[ino] {
				if _, dup := found[ino]; !dup {
					found[ino] = path
				}
			}
		}
		// Only nsfs inodes: a file left in dirs without its mount has an
		// inode of the directory's file system.
		var self unix.Stat_t
		if unix.Stat("/proc/self/ns/net", &self) != nil {
			return found
		}
		for _, dir := range dirs {
			entries, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, e := range entries {
				path := filepath.Join(dir, e.Name())
				var st unix.Stat_t
				if unix.Stat(path, &st) == nil && st.Dev == self.Dev {
					take(path, st.Ino)
				}
			}
		}
		if len(found) == len(want) {
			return found
		}
		procs, err := os.ReadDir("/proc")
		if err != nil {
			return found
		}
		for _, p := range procs {
			if _, err := strconv.Atoi(p.Name()); err != nil {
				continue
			}
			path := "/proc/" + p.Name() + "/ns/net"
			link, err := os.Readlink(path)
			if err != nil {
				continue
			}
			// "net:[4026532000]"
			ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "net:["), "]"), 10, 64)
			if err == nil {
				take(path, ino)
			}
		}
		return found
	}
}
