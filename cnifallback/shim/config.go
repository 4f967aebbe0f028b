package shim

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// DefaultAgentSocket is where the agent listens unless the conflist entry
// says otherwise (meshlet's --cni-socket).
const DefaultAgentSocket = "/var/run/meshlet/cni.sock"

// DefaultAgentTimeout bounds one call to the agent: enrollment inside it is
// bounded by the agent's own timeout, well below this.
const DefaultAgentTimeout = 5 * time.Second

// Config is meshlet-cni's entry in the conflist.
type Config struct {
	types.PluginConf
	// AgentSocket is the agent's Unix socket.
	AgentSocket string `json:"agentSocket,omitempty"`
	// AgentTimeout bounds one call to the agent (a Go duration, e.g. "5s").
	AgentTimeout string `json:"agentTimeout,omitempty"`
	// ExcludeNamespaces are namespaces whose pods start even when the agent
	// cannot be reached (the mesh's own infrastructure, so that it can
	// start on a node whose agent is down). Every other pod fails closed.
	ExcludeNamespaces []string `json:"excludeNamespaces,omitempty"`

	timeout time.Duration
}

// ParseConfig reads the plugin's configuration from stdin and its
// previous result. Errors name the field; they are CNI errors with the
// spec's codes (6: undecodable, 7: invalid configuration), so the runtime
// reports a conflist to fix rather than an internal failure (skel's code
// for any other error).
func ParseConfig(stdin []byte) (*Config, error) {
	conf := &Config{AgentSocket: DefaultAgentSocket}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "meshlet-cni: configuration: "+err.Error(), "")
	}
	if conf.AgentSocket == "" || !filepath.IsAbs(conf.AgentSocket) {
		return nil, invalidConfig("meshlet-cni: agentSocket %q: want an absolute path", conf.AgentSocket)
	}
	conf.timeout = DefaultAgentTimeout
	if conf.AgentTimeout != "" {
		d, err := time.ParseDuration(conf.AgentTimeout)
		if err != nil || d <= 0 {
			return nil, invalidConfig("meshlet-cni: agentTimeout %q: want a positive duration such as 5s", conf.AgentTimeout)
		}
		conf.timeout = d
	}
	for i, ns := range conf.ExcludeNamespaces {
		if ns == "" {
			return nil, invalidConfig("meshlet-cni: excludeNamespaces[%d] is empty", i)
		}
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "meshlet-cni: prevResult: "+err.Error(), "")
	}
	return conf, nil
}

func invalidConfig(format string, args ...any) error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(format, args...), "")
}

// errNoPrevResult: a chained plugin runs after an interface plugin.
var errNoPrevResult = types.NewError(types.ErrInvalidNetworkConfig, "meshlet-cni: no prevResult: it must come after the pod network's plugin in a conflist", "")
