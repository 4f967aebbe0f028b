package agent

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/zds"
)

// EnvPrefix prefixes the environment variable of every flag:
// --ztunnel-socket is MESHLET_ZTUNNEL_SOCKET.
const EnvPrefix = "MESHLET_"

// Config is the daemon's whole configuration.
type Config struct {
	// NodeName is the Kubernetes node this agent serves.
	NodeName string
	// ZtunnelSocket is where ztunnel connects (ZDS).
	ZtunnelSocket string
	// Policy selects pods and their options.
	Policy policy.Config
}

// DefaultConfig returns the defaults: Istio's selection rules and ztunnel's
// socket path.
func DefaultConfig() Config {
	return Config{ZtunnelSocket: zds.DefaultSocketPath, Policy: policy.Defaults()}
}

// AddFlags registers every setting on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "Kubernetes node name this agent serves (DaemonSet: from spec.nodeName)")
	fs.StringVar(&c.ZtunnelSocket, "ztunnel-socket", c.ZtunnelSocket, "Unix socket ztunnel connects to (ZDS protocol)")
	fs.Var(newListValue(&c.Policy.ExcludedNamespaces), "excluded-namespaces", "comma-separated namespaces whose pods are never enrolled")
	fs.Var(newListValue(&c.Policy.DeniedRuntimeHandlers), "denied-runtime-handlers", "comma-separated RuntimeClass handlers (e.g. runsc) whose pods are never enrolled: in-pod rules cannot take effect there")
	fs.BoolVar(&c.Policy.DNSCapture, "dns-capture", c.Policy.DNSCapture, "redirect pods' DNS to ztunnel by default (per pod: annotation ambient.istio.io/dns-capture)")
	fs.BoolVar(&c.Policy.IPv6, "ipv6", c.Policy.IPv6, "program IPv6 redirection for pods with IPv6 addresses")
	fs.StringVar(&c.Policy.DataplaneModeLabel, "dataplane-mode-label", c.Policy.DataplaneModeLabel, "pod and namespace label that selects the mesh (value ambient) or opts a pod out (none)")
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *Config) Validate() error {
	if c.ZtunnelSocket == "" {
		return errors.New("--ztunnel-socket must not be empty")
	}
	if c.Policy.DataplaneModeLabel == "" {
		return errors.New("--dataplane-mode-label must not be empty")
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	return nil
}

// EnvName is the environment variable for a flag.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets every flag of fs that was not given on the command line
// from its environment variable, if present. Call it after fs.Parse: the
// command line wins.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		v, ok := lookup(EnvName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (flag --%s): %w", EnvName(f.Name), v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// listValue is a comma-separated list flag; setting it replaces the default.
type listValue struct{ dst *[]string }

func newListValue(dst *[]string) *listValue { return &listValue{dst: dst} }

func (l *listValue) String() string {
	if l == nil || l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, ",")
}

func (l *listValue) Set(s string) error {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	*l.dst = out
	return nil
}
