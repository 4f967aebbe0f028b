package cnifallback

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/meshlet/meshlet/cnifallback/install"
	"github.com/meshlet/meshlet/cnifallback/server"
)

// Config is the CNI fallback's part of the daemon's configuration.
type Config struct {
	// ConfDir is the runtime's CNI configuration directory (--cni-conf-dir).
	ConfDir string
	// BinDir is where the runtime looks for CNI plugins (--cni-bin-dir);
	// meshlet-cni is copied there.
	BinDir string
	// Socket is the agent's socket for meshlet-cni (--cni-socket); the
	// conflist entry names it as agentSocket.
	Socket string
	// OwnConflist writes 05-meshlet.conflist (a copy of the primary with
	// meshlet-cni appended) instead of editing the primary conflist
	// (--cni-own-conflist).
	OwnConflist bool
	// PluginBinary is the meshlet-cni binary to copy into BinDir
	// (--cni-plugin-binary); empty: meshlet-cni next to the meshlet
	// executable.
	PluginBinary string
	// CRISocket is the runtime's CRI socket (--cri-socket), listed for
	// the pods already running; empty: the first default that answers.
	CRISocket string
	// ResyncInterval is how often the runtime's pods are listed again, to
	// forget pods whose DEL never reached the agent and to enroll pods
	// that started while meshlet was not in the chain.
	ResyncInterval time.Duration
	// RemoveIstioCNI takes istio-cni's plugin out of the conflists in
	// ConfDir once meshlet has taken the node over from istio-cni's agent
	// (--remove-istio-cni-plugin); without it, meshlet says where it is.
	RemoveIstioCNI bool
}

// DefaultConfig returns the defaults: the kubelet's and runtimes' usual
// CNI directories.
func DefaultConfig() Config {
	return Config{ConfDir: install.DefaultConfDir, BinDir: install.DefaultBinDir, Socket: server.DefaultSocketPath,
		ResyncInterval: 30 * time.Second}
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *Config) Validate() error {
	for _, p := range []struct{ flag, path string }{{"--cni-conf-dir", c.ConfDir}, {"--cni-bin-dir", c.BinDir}, {"--cni-socket", c.Socket}} {
		if p.path == "" || !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s=%q: want an absolute path", p.flag, p.path)
		}
	}
	if c.PluginBinary != "" && !filepath.IsAbs(c.PluginBinary) {
		return fmt.Errorf("--cni-plugin-binary=%q: want an absolute path", c.PluginBinary)
	}
	if c.ResyncInterval < time.Second {
		return fmt.Errorf("--cri-resync-interval=%v: want at least 1s", c.ResyncInterval)
	}
	return nil
}
