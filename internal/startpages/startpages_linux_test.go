package startpages

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestCleanReadOnlySpans(t *testing.T) {
	smaps := `00400000-0204e000 r-xp 00000000 fe:01 1234                               /usr/bin/meshlet
Size:              28984 kB
Rss:               15480 kB
Anonymous:             0 kB
0204e000-043ff000 r--p 01c4e000 fe:01 1234                               /usr/bin/meshlet
Rss:               25220 kB
Anonymous:             0 kB
043ff000-044ae000 rw-p 03fff000 fe:01 1234                               /usr/bin/meshlet
Anonymous:           240 kB
044ae000-064fb000 rw-p 00000000 00:00 0
Anonymous:           148 kB
7f0000000000-7f0000001000 r--p 00000000 fe:01 99                         /usr/lib/other.so
Anonymous:             0 kB
7f0000002000-7f0000003000 r--p 00000000 fe:02 1234                       /mnt/same-inode-other-device
Anonymous:             0 kB
7f0000004000-7f0000005000 r--p 00000000 00:2a 777                        /usr/bin/meshlet
Anonymous:             0 kB
7f0000006000-7f0000008000 r--p 00000000 fe:01 1234                       /usr/bin/meshlet
Anonymous:             4 kB
VmFlags: rd mr mw me
`
	spans, err := cleanReadOnlySpans(strings.NewReader(smaps), "/usr/bin/meshlet", 0xfe<<8|0x01, 1234)
	if err != nil {
		t.Fatal(err)
	}
	// The third: the path's, on an overlay's device. Not the last: it
	// holds a page of its own (relocated, or patched by a uprobe).
	want := []span{{0x400000, 0x204e000}, {0x204e000, 0x43ff000}, {0x7f0000004000, 0x7f0000005000}}
	if !slices.Equal(spans, want) {
		t.Fatalf("spans = %#v, want %#v", spans, want)
	}
}

// TestRelease releases this test binary's start-up pages: its file-backed
// resident memory falls, and the process goes on running the code it
// unmapped (this test's own, the runtime's).
func TestRelease(t *testing.T) {
	before := rssFile(t)
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("released nothing: no read-only mapping of the binary found")
	}
	// What runs next uses the code, the type data and the function
	// tables it unmapped: a collection, reflection, formatting.
	runtime.GC()
	if got := fmt.Sprintf("%v %T", map[string][]int{"a": {1}}, t); got != "map[a:[1]] *testing.T" {
		t.Fatalf("after the release: %q", got)
	}
	after := rssFile(t)
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after: nothing unmapped", before, after)
	}
	t.Logf("RssFile %d kB -> %d kB (%d bytes of mappings)", before, after, n)
}

func rssFile(t *testing.T) uint64 {
	_, file, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	if file == 0 {
		t.Fatal("RssFile: 0")
	}
	return file >> 10
}
