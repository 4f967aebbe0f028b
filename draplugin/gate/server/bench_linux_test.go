package server_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/gate"
	"github.com/meshlet/meshlet/internal/privtest"
)

// BenchmarkHookExec is what the gate adds to a mesh container's start:
// the runtime forks and runs the meshlet-gate binary (built here as
// `make build` does), which reads the state, finds the namespace, asks
// meshlet and exits. Two floors run beside it: an empty Go program (the
// Go runtime's start-up) and /bin/true (process creation alone).
func BenchmarkHookExec(b *testing.B) {
	privtest.RequireRoot(b)
	dir := b.TempDir()
	bin := filepath.Join(dir, "meshlet-gate")
	goBuild(b, bin, "../../../cmd/meshlet-gate")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(filepath.Join(dir, "empty.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	goBuild(b, empty, filepath.Join(dir, "empty.go"))
	ino := ownNetns(b)
	s, _ := serve(b, &view{records: map[string]enroll.Record{"web-uid": {UID: "web-uid", NetnsInode: ino}}})
	st := state("web-uid")
	for _, bm := range []struct {
		name string
		argv []string
	}{
		{"meshlet-gate", []string{bin, "--socket=" + s.Addr(), "--timeout=2s"}},
		{"floor=empty-go-program", []string{empty}},
		{"floor=bin-true", []string{"/bin/true"}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(bm.argv[0], bm.argv[1:]...)
				cmd.Stdin = bytes.NewReader(st)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%s: %v: %s", bm.name, err, out)
				}
			}
		})
	}
}

func goBuild(b *testing.B, out, pkg string) {
	b.Helper()
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
}

// BenchmarkAsk is meshlet's part of it: one request answered over the
// socket.
func BenchmarkAsk(b *testing.B) {
	privtest.RequireRoot(b)
	ino := ownNetns(b)
	s, _ := serve(b, &view{records: map[string]enroll.Record{"web-uid": {UID: "web-uid", NetnsInode: ino}}})
	req := &gate.Request{NetnsInode: ino, ContainerID: "ctr1", PodUID: "web-uid"}
	for b.Loop() {
		resp, err := gate.Ask(s.Addr(), req, 2*time.Second)
		if err != nil || !resp.Allow {
			b.Fatalf("%+v, %v", resp, err)
		}
	}
}
