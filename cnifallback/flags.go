package cnifallback

import (
	"flag"
	"strings"

	"github.com/meshlet/meshlet/agent/cri"
	"github.com/meshlet/meshlet/cnifallback/install"
)

// AddFlags registers the CNI mode settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ConfDir, "cni-conf-dir", c.ConfDir, "CNI mode: the runtime's CNI configuration directory; meshlet-cni is chained into its primary conflist")
	fs.StringVar(&c.BinDir, "cni-bin-dir", c.BinDir, "CNI mode: the runtime's CNI plugin directory; meshlet-cni is copied there")
	fs.StringVar(&c.Socket, "cni-socket", c.Socket, "CNI mode: the Unix socket meshlet-cni calls (written into its conflist entry as agentSocket)")
	fs.BoolVar(&c.OwnConflist, "cni-own-conflist", c.OwnConflist, "CNI mode: write "+install.OwnConflistName+" (a copy of the primary conflist with meshlet-cni appended) instead of editing the primary")
	fs.StringVar(&c.PluginBinary, "cni-plugin-binary", c.PluginBinary, "CNI mode: the meshlet-cni binary to install (default: meshlet-cni next to the meshlet executable)")
	fs.StringVar(&c.CRISocket, "cri-socket", c.CRISocket, "the runtime's CRI socket, for CNI mode's list of running pods and --mode auto (default: the first of "+strings.Join(cri.DefaultEndpoints, ", ")+" that answers)")
	fs.BoolVar(&c.RemoveIstioCNI, "remove-istio-cni-plugin", c.RemoveIstioCNI, "once meshlet has taken the node over from istio-cni's node agent, remove istio-cni's plugin from the conflists in --cni-conf-dir (istio-cni removes it itself when it is uninstalled from the node; left behind without its agent, it fails every pod the node starts); without it, meshlet only logs where the plugin is")
	fs.DurationVar(&c.ResyncInterval, "cri-resync-interval", c.ResyncInterval, "how often the runtime's pods are listed on its CRI socket: a pod the list has not shown for twice this (CNI mode: at least 2m) is forgotten, its removal having never reached meshlet; CNI mode also enrolls listed pods that started outside the chain")
}
