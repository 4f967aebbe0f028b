package startpages

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Release unmaps the running binary's read-only segments' resident pages
// (see the package comment). It returns the size of the spans released.
func Release() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return 0, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	spans, err := readOnlySpans(f, exe, uint64(st.Dev), st.Ino)
	if err != nil {
		return 0, err
	}
	if len(spans) == 0 {
		return 0, fmt.Errorf("no read-only mapping of %s in /proc/self/maps", exe)
	}
	var total uint64
	for _, sp := range spans {
		// The raw syscall takes the addresses as integers: no pointer
		// to memory Go does not manage is ever made.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, sp.lo, sp.hi-sp.lo, unix.MADV_DONTNEED); errno != 0 {
			return total, fmt.Errorf("madvise %#x-%#x: %w", sp.lo, sp.hi, errno)
		}
		total += uint64(sp.hi - sp.lo)
	}
	return total, nil
}

type span struct{ lo, hi uintptr }

// readOnlySpans is the mappings in maps (/proc/self/maps) of the binary
// without write permission: those of the file dev:ino, or, where maps
// names another device (an overlay filesystem's, as in a container), of
// the file at path exe.
func readOnlySpans(maps io.Reader, exe string, dev, ino uint64) ([]span, error) {
	var spans []span
	s := bufio.NewScanner(maps)
	for s.Scan() {
		// 00400000-0204e000 r-xp 00000000 fe:01 1234   /usr/bin/meshlet
		f := strings.Fields(s.Text())
		if len(f) < 6 || len(f[1]) < 2 || f[1][1] == 'w' {
			continue
		}
		major, minor, ok := strings.Cut(f[3], ":")
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(major, 16, 32)
		mi, err2 := strconv.ParseUint(minor, 16, 32)
		n, err3 := strconv.ParseUint(f[4], 10, 64)
		same := err1 == nil && err2 == nil && err3 == nil && n == ino && unix.Mkdev(uint32(ma), uint32(mi)) == dev
		if !same && strings.Join(f[5:], " ") != exe {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || h <= l {
			continue
		}
		spans = append(spans, span{uintptr(l), uintptr(h)})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/self/maps: %w", err)
	}
	return spans, nil
}

// Resident reads this process's resident memory, anonymous and
// file-backed (RssAnon, RssFile of /proc/self/status), in bytes.
func Resident() (anon, file uint64, err error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		key, value, _ := strings.Cut(line, ":")
		var into *uint64
		switch key {
		case "RssAnon":
			into = &anon
		case "RssFile":
			into = &file
		default:
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/self/status: %s: %w", key, err)
		}
		*into = kb << 10
	}
	return anon, file, nil
}
