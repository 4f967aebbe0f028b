package cnifallback

import (
	"slices"
	"sync"

	"github.com/meshlet/meshlet/cnifallback/install"
)

// Exclusions carries the node's excluded namespaces into meshlet-cni's
// entry (the namespaces whose pods the plugin lets start while meshlet is
// away), with ztunnel's namespace: the node settings may change them
// while meshlet runs, before or after CNI mode's installer exists.
type Exclusions struct {
	ztunnelNamespace string

	mu         sync.Mutex
	namespaces []string
	installer  exclusionsInstaller // nil until CNI mode is built
}

// exclusionsInstaller is CNI mode's installer, as Exclusions uses it.
type exclusionsInstaller interface {
	SetExcludeNamespaces(namespaces []string) (changed bool)
}

var _ exclusionsInstaller = (*install.Installer)(nil)

// NewExclusions starts from the node's excluded namespaces; ztunnel's is
// always added.
func NewExclusions(ztunnelNamespace string, namespaces []string) *Exclusions {
	return &Exclusions{ztunnelNamespace: ztunnelNamespace, namespaces: slices.Clone(namespaces)}
}

// SetExcludedNamespaces is the node settings' list now.
func (c *Exclusions) SetExcludedNamespaces(namespaces []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.namespaces = slices.Clone(namespaces)
	if c.installer != nil {
		c.installer.SetExcludeNamespaces(c.entry())
	}
}

// Attach gives in the list as it is now, and every change from now on.
func (c *Exclusions) Attach(in exclusionsInstaller) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.installer = in
	in.SetExcludeNamespaces(c.entry())
}

func (c *Exclusions) entry() []string {
	return append(slices.Clone(c.namespaces), c.ztunnelNamespace)
}
