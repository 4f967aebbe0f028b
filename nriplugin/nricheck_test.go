package nriplugin

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckNRI(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	criSocket := filepath.Join(dir, "cri.sock") // nothing there

	// Nothing answers: every runtime's settings, the socket in them, and
	// an error (the init container fails).
	var out bytes.Buffer
	err := CheckNRI(context.Background(), socket, criSocket, &out)
	if err == nil || !strings.Contains(err.Error(), socket) {
		t.Fatalf("CheckNRI with nothing answering = %v, want an error naming %s", err, socket)
	}
	for _, want := range []string{"no runtime answers", "enable_nri = true", "disable = false", "required_plugins = ['meshlet']",
		"nri_listen = \"" + socket + "\"", "restart the runtime"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("CheckNRI output lacks %q:\n%s", want, out.String())
		}
	}

	// The NRI socket answers: nothing to do.
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out.Reset()
	if err := CheckNRI(context.Background(), socket, criSocket, &out); err != nil || !strings.Contains(out.String(), "NRI is enabled") {
		t.Fatalf("CheckNRI with NRI answering = %v, %q", err, out.String())
	}
}
