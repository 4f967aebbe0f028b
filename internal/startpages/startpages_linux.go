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

// Release unmaps the resident pages of the running binary's read-only
// segments (see the package comment). It returns the size of the spans
// released.
//
// A mapping that holds a page of its own (smaps' Anonymous: a page copied
// on write) is left alone: MADV_DONTNEED would put the file's bytes back
// in its place. A read-only mapping has one where the dynamic loader
// relocated it before making it read-only (RELRO, in a binary linked with
// cgo or built as PIE) or where a uprobe or a debugger's breakpoint
// patched code. meshlet's image binary is static and has none.
func Release() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return 0, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	spans, err := cleanReadOnlySpans(f, exe, uint64(st.Dev), st.Ino)
	if err != nil {
		return 0, err
	}
	if len(spans) == 0 {
		return 0, fmt.Errorf("no read-only mapping of %s without private pages in /proc/self/smaps", exe)
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

// cleanReadOnlySpans is the mappings in smaps (/proc/self/smaps) of the
// binary that are neither writable nor hold a page of their own: those of
// the file dev:ino, or, where smaps names another device (an overlay
// filesystem's, as in a container), of the file at path exe.
func cleanReadOnlySpans(smaps io.Reader, exe string, dev, ino uint64) ([]span, error) {
	var spans []span
	var cur *span // the mapping being read, if it is a candidate
	end := func() {
		if cur != nil {
			spans = append(spans, *cur)
		}
		cur = nil
	}
	s := bufio.NewScanner(smaps)
	for s.Scan() {
		line := s.Text()
		if v, ok := strings.CutPrefix(line, "Anonymous:"); ok {
			if cur != nil && strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")) != "0" {
				cur = nil // a page of its own: left alone
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 || !strings.Contains(f[0], "-") || strings.HasSuffix(f[0], ":") {
			continue // a field of the mapping being read
		}
		// A mapping's header:
		// 00400000-0204e000 r-xp 00000000 fe:01 1234   /usr/bin/meshlet
		end()
		if len(f) < 6 || len(f[1]) < 2 || f[1][1] == 'w' || !isFile(f, exe, dev, ino) {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || h <= l {
			continue
		}
		cur = &span{uintptr(l), uintptr(h)}
	}
	end()
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/self/smaps: %w", err)
	}
	return spans, nil
}

// isFile reports whether the mapping header's fields f name the file
// dev:ino, or the path exe.
func isFile(f []string, exe string, dev, ino uint64) bool {
	if major, minor, ok := strings.Cut(f[3], ":"); ok {
		ma, err1 := strconv.ParseUint(major, 16, 32)
		mi, err2 := strconv.ParseUint(minor, 16, 32)
		n, err3 := strconv.ParseUint(f[4], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil && n == ino && unix.Mkdev(uint32(ma), uint32(mi)) == dev {
			return true
		}
	}
	return strings.Join(f[5:], " ") == exe
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
