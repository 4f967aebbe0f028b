package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteCreatesAndReplaces(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	if err := Write(dir, "f", []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, "f", []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil || string(got) != "two" {
		t.Fatalf("content %q, %v; want two", got, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, "f"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	onlyFiles(t, dir, "f")
}

// failAfter yields n bytes and then fails, as a full disk or a dying
// source would.
type failAfter struct{ n int }

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("injected read failure")
	}
	k := min(len(p), f.n)
	for i := range k {
		p[i] = 'x'
	}
	f.n -= k
	return k, nil
}

func TestWriteWithFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	old := []byte("the old content\n")
	if err := os.WriteFile(filepath.Join(dir, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteWith(dir, "f", &failAfter{n: 5}, 0o644, Options{TempPrefix: ".p-"})
	if err == nil {
		t.Fatal("write from a failing reader succeeded")
	}
	checkOld := func() {
		t.Helper()
		got, _ := os.ReadFile(filepath.Join(dir, "f"))
		if !bytes.Equal(got, old) {
			t.Fatalf("old file changed to %q", got)
		}
		onlyFiles(t, dir, "f")
	}
	checkOld()

	refuse := errors.New("source changed")
	err = WriteWith(dir, "f", bytes.NewReader([]byte("new")), 0o644, Options{BeforeRename: func() error { return refuse }})
	if !errors.Is(err, refuse) {
		t.Fatalf("BeforeRename's error not returned: %v", err)
	}
	checkOld()
}

func TestWriteWithModeAndPrefix(t *testing.T) {
	dir := t.TempDir()
	var seen []string
	err := WriteWith(dir, "bin", io.LimitReader(bytes.NewReader(make([]byte, 100)), 10), 0o755, Options{
		TempPrefix: ".p-",
		BeforeRename: func() error {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				seen = append(seen, e.Name())
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || len(seen[0]) < len(".p-bin.tmp-") || seen[0][:len(".p-bin.tmp-")] != ".p-bin.tmp-" {
		t.Errorf("temporary file %q, want .p-bin.tmp-*", seen)
	}
	fi, err := os.Stat(filepath.Join(dir, "bin"))
	if err != nil || fi.Mode().Perm() != 0o755 || fi.Size() != 10 {
		t.Fatalf("stat %v %v", fi, err)
	}
	if err := WriteWith(filepath.Join(dir, "missing"), "x", bytes.NewReader(nil), 0o644, Options{}); err == nil {
		t.Error("WriteWith created a missing directory")
	}
}

func onlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != len(want) {
		t.Fatalf("directory holds %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("directory holds %q, want %q", got, want)
		}
	}
}
