package e2e

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCNIModeRefusesWrongBinDir: in CNI mode, given a plugin directory the
// runtime does not use (--cni-bin-dir, the chart's paths.cniBinDir, set
// wrong), meshlet refuses to chain meshlet-cni, which the runtime would not
// find there and so would fail every new pod of the node; it writes
// nothing, names the directories the runtime (asked through CRI) looks
// plugins up in and what to set, is not ready; and the node's pods keep
// starting.
func TestCNIModeRefusesWrongBinDir(t *testing.T) {
	cc := startCNICluster(t)
	original, err := os.ReadFile(cc.env.PrimaryConflist())
	if err != nil {
		t.Fatal(err)
	}
	wrong := t.TempDir()
	ml, err := cc.env.StartMeshlet(filepath.Join(t.TempDir(), "zt.sock"), "--kubeconfig="+cc.kubeconfig, "--dra=false", "--cni-bin-dir="+wrong)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ml.Stop(); err != nil {
			t.Errorf("meshlet stop: %v", err)
		}
	})
	// containerd says where it looks plugins up (CRI status): meshlet
	// refuses a directory not among them, naming them and what to set.
	var log string
	waitFor(t, "meshlet's refusal in its log", func() bool {
		b, _ := os.ReadFile(ml.LogPath)
		log = string(b)
		return strings.Contains(log, "--cni-bin-dir="+wrong+" is not where the runtime looks plugins up")
	})
	for _, want := range []string{"it reports " + cc.env.CNIBinDir(), "paths.cniBinDir", "Not chaining"} {
		if !strings.Contains(log, want) {
			t.Errorf("meshlet's refusal does not name %q:\n%s", want, log)
		}
	}
	if code, body, err := ml.Get(ml.HealthURL + "/readyz"); err != nil || code == http.StatusOK {
		t.Errorf("/readyz: %d %q, %v; want not ready while meshlet-cni is not chained", code, body, err)
	}
	now, err := os.ReadFile(cc.env.PrimaryConflist())
	if err != nil || !bytes.Equal(now, original) {
		t.Fatalf("the primary conflist changed (%v):\n%s\nwant, untouched:\n%s", err, now, original)
	}
	for _, dir := range []string{wrong, cc.env.CNIBinDir()} {
		if _, err := os.Stat(filepath.Join(dir, "meshlet-cni")); !os.IsNotExist(err) {
			t.Errorf("meshlet-cni copied to %s (%v): want nothing written", dir, err)
		}
	}
	// The node's pods start, through the primary's chain alone.
	for _, ns := range []string{"plain", "mesh"} {
		start := time.Now()
		p := cc.mustRun(t, cc.apiPod(t, ns))
		if p.info.NetnsPath == "" {
			t.Errorf("pod in %s: no network namespace", ns)
		}
		t.Logf("pod in %s started in %v with meshlet refusing the plugin directory", ns, time.Since(start).Round(time.Millisecond))
	}
}
