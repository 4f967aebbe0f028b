package zds_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/agent/zds/zdstest"
	"github.com/meshlet/meshlet/internal/privtest"
)

// childEnv makes the test binary act as a ztunnel that connects to the
// socket it names and reports whether it got the snapshot (for the
// non-root peer test).
const childEnv = "MESHLET_TEST_ZDS_CHILD_SOCKET"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		c, err := zdstest.DialRaw(path)
		if err != nil {
			fmt.Println("connect:", err)
			os.Exit(0)
		}
		if err = c.SendHello(); err == nil {
			_, err = c.ReadSnapshot(2 * time.Second)
		}
		fmt.Println("after connecting:", err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestNonRootPeerRefused: a process that is not root is closed before it
// gets the snapshot (every pod's network namespace), even when the
// socket's mode lets it connect; ztunnel, as root, is served after it.
func TestNonRootPeerRefused(t *testing.T) {
	s := startServer(t, zds.Config{SocketMode: 0o666})
	out := privtest.RunAsNobody(t, childEnv+"="+s.Addr(), filepath.Dir(s.Addr()))
	// It connected (the socket's mode let it), and then got no snapshot.
	if !strings.Contains(out, "after connecting: ") || strings.Contains(out, "after connecting: <nil>") {
		t.Fatalf("the non-root peer got: %s; want it connected and closed before the snapshot", out)
	}
	if n := s.Connections(); n != 0 {
		t.Fatalf("%d ztunnel connections after a non-root peer, want 0", n)
	}
	connect(t, s)
	waitConns(t, s, 1)
}
