package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/meshlet/meshlet/agent/netns"
	"github.com/meshlet/meshlet/agent/netns/netnstest"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/state"
	"github.com/meshlet/meshlet/draplugin/claimstore"
	"github.com/meshlet/meshlet/internal/privtest"
)

// TestRemoveNodeState: an uninstalled meshlet leaves no node-side table
// and no state files behind (in a node netns of the test's own).
func TestRemoveNodeState(t *testing.T) {
	privtest.RequireRoot(t)
	logger, _ := ktesting.NewTestContext(t)
	nodePath := netnstest.New(t)
	node, err := netns.Open(nodePath)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	rcfg := redirect.DefaultConfig()
	rcfg.HostNetnsFd = netnstest.Fd(t, node)
	redir, err := redirect.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer redir.Close()
	table := func() error {
		return exec.Command("nsenter", "--net="+nodePath, "nft", "list", "table", "inet", "meshlet").Run()
	}
	if err := table(); err != nil {
		t.Fatalf("no node table to remove: %v", err)
	}
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	for _, name := range []string{state.FileName, claimstore.FileName, state.NodeLockFile} {
		if err := os.WriteFile(filepath.Join(cfg.StateDir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removeNodeState(logger, cfg.StateDir, redir)
	if table() == nil {
		t.Fatal("node table inet meshlet still there")
	}
	for _, name := range []string{state.FileName, claimstore.FileName} {
		if _, err := os.Stat(filepath.Join(cfg.StateDir, name)); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", name, err)
		}
	}
}
