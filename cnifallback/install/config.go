package install

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// PluginType is meshlet's entry's "type" in the conflist and so the name
// of its binary in BinDir: the runtime executes BinDir/<type>.
const PluginType = "meshlet-cni"

// OwnConflistName is the file Config.OwnConflist writes: it sorts before
// the usual 10-* files so that the runtime picks it up.
const OwnConflistName = "05-meshlet.conflist"

// Defaults of the daemon's flags.
const (
	DefaultConfDir        = "/etc/cni/net.d"
	DefaultBinDir         = "/opt/cni/bin"
	DefaultResyncInterval = 30 * time.Second
)

// Config says where the node's CNI files are and what meshlet's entry says.
// The names in Validate's errors are the daemon's flags.
type Config struct {
	// ConfDir is the runtime's CNI config directory (--cni-conf-dir).
	ConfDir string
	// BinDir is the runtime's CNI plugin directory (--cni-bin-dir).
	BinDir string
	// PluginBinary is the meshlet-cni binary to copy to BinDir/meshlet-cni
	// (--cni-plugin-binary). Empty: something else installs it; Install then
	// only checks that it is there (chaining a plugin the runtime cannot
	// find would fail every pod's ADD) and Uninstall leaves it.
	PluginBinary string
	// AgentSocket is the agent's socket, the entry's agentSocket
	// (--cni-socket).
	AgentSocket string
	// AgentTimeout, when > 0, is the entry's agentTimeout; otherwise the
	// plugin's default applies.
	AgentTimeout time.Duration
	// ExcludeNamespaces, when not empty, is the entry's excludeNamespaces,
	// sorted and deduplicated (the node's excluded namespaces and
	// ztunnel's namespace); SetExcludeNamespaces changes it.
	ExcludeNamespaces []string
	// OwnConflist writes OwnConflistName, a copy of the primary conflist
	// with meshlet chained, instead of editing the primary's file
	// (--cni-own-conflist). For a primary CNI that owns its file outright.
	OwnConflist bool
	// ResyncInterval is how often Run checks without an event, for events
	// lost to an fsnotify overflow or a watch that could not be set.
	// 0: DefaultResyncInterval.
	ResyncInterval time.Duration
	// RuntimeBinDirs, if set, asks the runtime where it looks plugins up
	// (containerd reports it through CRI); ok is false when it does not
	// say. BinDir must be one of them, or Install refuses to chain.
	// Without an answer, Install refuses a BinDir that holds none of the
	// primary's plugins.
	RuntimeBinDirs func(ctx context.Context) (dirs []string, ok bool)
	// OnReassert, if set, is called by Run after each pass that had to
	// write (the conflist or the binary) with what triggered the pass
	// ("start", "conf-dir", "bin-dir", "resync", "overflow", "watch",
	// "poll", "retry", "settings": SetExcludeNamespaces) and the time from the trigger to the write being
	// done: the reassert-latency metric. It runs on Run's goroutine, so it
	// must be quick. Loop-guard back-offs are counted in Stats.
	OnReassert func(trigger string, latency time.Duration)
}

// Validate checks the configuration; errors name the flag.
func (c Config) Validate() error {
	for _, p := range []struct{ flag, path string }{
		{"--cni-conf-dir", c.ConfDir},
		{"--cni-bin-dir", c.BinDir},
		{"--cni-socket", c.AgentSocket},
	} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s %q: want an absolute path", p.flag, p.path)
		}
	}
	if c.PluginBinary != "" && !filepath.IsAbs(c.PluginBinary) {
		return fmt.Errorf("--cni-plugin-binary %q: want an absolute path (or empty: do not copy)", c.PluginBinary)
	}
	if c.AgentTimeout < 0 {
		return fmt.Errorf("agent timeout %v: want a positive duration (or 0: the plugin's default)", c.AgentTimeout)
	}
	if c.ResyncInterval < 0 {
		return fmt.Errorf("resync interval %v: want a positive duration (or 0: %v)", c.ResyncInterval, DefaultResyncInterval)
	}
	for _, ns := range c.ExcludeNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("excluded namespace %q (--excluded-namespaces) is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
	}
	return nil
}

// entry is meshlet-cni's entry in a conflist, as cnifallback/shim reads
// it. The field order is the key order in the file; there is no name or
// cniVersion: the runtime passes the list's to every plugin.
type entry struct {
	Type              string   `json:"type"`
	AgentSocket       string   `json:"agentSocket"`
	AgentTimeout      string   `json:"agentTimeout,omitempty"`
	ExcludeNamespaces []string `json:"excludeNamespaces,omitempty"`
	// ConvertedFrom names the single-plugin .conf or .json this conflist
	// was made from, so that Uninstall can give it back. The plugin
	// ignores it (it decodes into a struct without that field).
	ConvertedFrom string `json:"convertedFrom,omitempty"`
}

func (c Config) entry() entry {
	e := entry{Type: PluginType, AgentSocket: c.AgentSocket}
	if c.AgentTimeout > 0 {
		e.AgentTimeout = c.AgentTimeout.String()
	}
	if len(c.ExcludeNamespaces) > 0 {
		ns := slices.Clone(c.ExcludeNamespaces)
		slices.Sort(ns)
		e.ExcludeNamespaces = slices.Compact(ns)
	}
	return e
}

// Outcome is what one Install pass did.
type Outcome struct {
	// Conflist is the file that holds meshlet's entry: the file the
	// runtime uses.
	Conflist string
	// Primary is the primary CNI's file it was derived from: Conflist
	// itself, unless a .conf was converted or OwnConflist is set.
	Primary string
	// Wrote: Conflist was written in this pass.
	Wrote bool
	// BinaryWrote: BinDir/meshlet-cni was written in this pass.
	BinaryWrote bool
	// Removed lists the files this pass removed: a .conf converted into
	// Conflist, or an OwnConflistName left by an earlier OwnConflist run.
	Removed []string
}

// Stats counts what an Installer did, for metrics.
type Stats struct {
	// Passes is the number of install passes (Install and Run's).
	Passes uint64
	// Writes is the number of passes that wrote the conflist or the binary.
	Writes uint64
	// Backoffs is the number of times Run's loop guard delayed a pass
	// because another writer kept undoing its work.
	Backoffs uint64
}
