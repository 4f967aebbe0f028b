package cnifallback

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoveFromChainKeepsTheBinary: a node served through NRI loses a
// meshlet-cni entry left in its conflist (nothing serves it there), and
// keeps the binary, which a runtime may still run for an old pod's DEL.
func TestRemoveFromChainKeepsTheBinary(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ConfDir, cfg.BinDir = t.TempDir(), t.TempDir()
	primary := filepath.Join(cfg.ConfDir, "10-net.conflist")
	original := `{
  "cniVersion": "1.0.0",
  "name": "net",
  "plugins": [
    {
      "type": "bridge"
    }
  ]
}
`
	chained := strings.Replace(original, `    }
  ]`, `    },
    {
      "type": "meshlet-cni",
      "agentSocket": "/var/run/meshlet/cni.sock"
    }
  ]`, 1)
	bin := filepath.Join(cfg.BinDir, "meshlet-cni")
	for file, content := range map[string]string{primary: chained, bin: "#!/bin/true\n"} {
		if err := os.WriteFile(file, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveFromChain(context.Background(), cfg, []string{"kube-system", "istio-system"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(primary)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != original {
		t.Fatalf("conflist after NRI mode started:\n%s\nwant the entry gone:\n%s", got, original)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the meshlet-cni binary must stay: %v", err)
	}
}
