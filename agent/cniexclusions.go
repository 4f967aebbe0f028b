package agent

import (
	"slices"
	"sync"

	"github.com/meshlet/meshlet/cnifallback/install"
)

// cniExclusions carries the node's excluded namespaces into meshlet-cni's
// entry (the namespaces whose pods the plugin lets start while meshlet is
// away), with ztunnel's namespace: the node settings may change them
// while meshlet runs, before or after CNI mode's installer exists.
type cniExclusions struct {
	ztunnelNamespace string

	mu         sync.Mutex
	namespaces []string
	installer  exclusionsInstaller // nil until CNI mode is built
}

// exclusionsInstaller is CNI mode's installer, as cniExclusions uses it.
type exclusionsInstaller interface {
	SetExcludeNamespaces(namespaces []string) (changed bool)
}

var _ exclusionsInstaller = (*install.Installer)(nil)

func newCNIExclusions(ztunnelNamespace string, namespaces []string) *cniExclusions {
	return &cniExclusions{ztunnelNamespace: ztunnelNamespace, namespaces: slices.Clone(namespaces)}
}

// SetExcludedNamespaces is the node settings' list now.
func (c *cniExclusions) SetExcludedNamespaces(namespaces []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.namespaces = slices.Clone(namespaces)
	if c.installer != nil {
		c.installer.SetExcludeNamespaces(c.entry())
	}
}

// attach gives in the list as it is now, and every change from now on.
func (c *cniExclusions) attach(in exclusionsInstaller) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.installer = in
	in.SetExcludeNamespaces(c.entry())
}

func (c *cniExclusions) entry() []string {
	return append(slices.Clone(c.namespaces), c.ztunnelNamespace)
}
