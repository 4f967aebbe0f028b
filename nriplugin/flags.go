package nriplugin

import (
	"flag"
)

// AddFlags registers the NRI plugin settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SocketPath, "nri-socket", c.SocketPath, "the container runtime's NRI socket")
	fs.StringVar(&c.Index, "nri-plugin-index", c.Index, "NRI plugin index (two digits; orders meshlet among the runtime's plugins)")
	fs.DurationVar(&c.EnrollTimeout, "enroll-timeout", c.EnrollTimeout, "bound on one enrollment inside a runtime hook; keep it below the runtime's NRI request timeout (2s by default)")
}
