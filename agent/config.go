package agent

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/nodesettings"
	"github.com/meshlet/meshlet/agent/policy"
	"github.com/meshlet/meshlet/agent/redirect"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/cnifallback"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/internal/flagvalue"
	"github.com/meshlet/meshlet/internal/logformat"
	"github.com/meshlet/meshlet/nriplugin"
)

// Mode selects how pods reach the core.
type Mode string

const (
	// ModeAuto uses NRI when the runtime's NRI socket answers, and CNI
	// when the runtime answers on its CRI socket but not on NRI.
	ModeAuto Mode = "auto"
	// ModeNRI uses the runtime's NRI plugin interface.
	ModeNRI Mode = "nri"
	// ModeCNI chains meshlet-cni into the runtime's CNI configuration, for
	// runtimes without NRI.
	ModeCNI Mode = "cni"
)

// Config is the daemon's whole configuration.
type Config struct {
	// NodeName is the Kubernetes node this agent serves.
	NodeName string
	// Mode selects the pod source.
	Mode Mode
	// NRI configures the NRI plugin (socket, index, enroll timeout).
	NRI nriplugin.Config
	// ZtunnelSocket is where ztunnel connects (ZDS).
	ZtunnelSocket string
	// SnapshotHold bounds how long, after start-up, ztunnel's snapshot
	// waits for the runtime's pods to be listed (zds.Config.SnapshotHold).
	SnapshotHold time.Duration
	// Redirect selects the in-pod rule backend.
	Redirect redirect.Config
	// Standalone runs without an API server: policy sees only the pod's
	// own labels and every service account is reported as
	// enroll.DefaultServiceAccount.
	Standalone bool
	// Kubeconfig is the API server configuration; empty: in-cluster.
	Kubeconfig string
	// StateDir holds the checkpoint of enrolled pods.
	StateDir string
	// HealthAddr serves /healthz and /readyz; MetricsAddr serves /metrics.
	// Empty disables.
	HealthAddr  string
	MetricsAddr string
	// HealthSocket serves /healthz and /readyz on a Unix socket from
	// start-up, before the node lock: the exec probes (meshlet probe) of a
	// pod that waits, during a surge update, for the previous meshlet to
	// exit. Each meshlet needs its own path. Empty disables.
	HealthSocket string
	// Policy selects pods and names the annotations of their settings.
	Policy policy.Config
	// PodDefaults are the per-pod settings of a pod that gives none.
	PodDefaults enroll.Settings
	// DRA is the kubelet plugin (off in standalone mode: no API server).
	DRA draplugin.Config
	// CNI is the CNI fallback (CNI mode).
	CNI cnifallback.Config
	// PodName and PodNamespace are meshlet's own pod (DaemonSet: downward
	// API). In CNI mode they tell an uninstall (the DaemonSet deleted)
	// from an update, which keeps meshlet-cni in the chain.
	PodName, PodNamespace string
	// UnmeshOnUninstall takes every pod out of the mesh (ztunnel Del,
	// in-pod rules removed) when meshlet's DaemonSet is deleted.
	UnmeshOnUninstall bool
	// SkipPodIPCheck enrolls a pod whose network namespace does not hold
	// its IPs, for a CNI that keeps them elsewhere.
	SkipPodIPCheck bool
	// ConfigMaps hold NodeSettings documents merged, in order, over the
	// flags' values of the settings they give, and watched: a change
	// applies while meshlet runs (see agent/nodesettings/live).
	ConfigMaps []kube.ObjectRef
	// LogVerbosity is klog's -v (a node setting too).
	LogVerbosity int
	// LogFormat is text (klog's) or json (Kubernetes components' JSON).
	LogFormat string
	// NodeTaint, if set, is the key of a NoSchedule taint meshlet keeps on
	// its node while the node's mesh cannot take new pods, so that the
	// scheduler places mesh pods elsewhere.
	NodeTaint string
	// NodeCondition, if set, is a node condition type meshlet keeps True
	// while the node's mesh can take new pods, for the Node Readiness
	// Controller to turn into a taint.
	NodeCondition string
}

// DefaultConfig returns the defaults: Istio's selection rules, ztunnel's
// socket path, the runtime's NRI socket, nftables redirection.
func DefaultConfig() Config {
	return Config{Mode: ModeAuto, NRI: nriplugin.DefaultConfig(), ZtunnelSocket: zds.DefaultSocketPath, SnapshotHold: zds.DefaultSnapshotHold,
		Redirect: redirect.DefaultConfig(), StateDir: "/var/lib/meshlet", HealthAddr: "127.0.0.1:9880", MetricsAddr: ":9881", Policy: defaultPolicy(),
		PodDefaults: enroll.Settings{DNSCapture: true}, LogFormat: "text", DRA: draplugin.DefaultConfig(), CNI: cnifallback.DefaultConfig()}
}

// AddFlags registers every setting on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "Kubernetes node name this agent serves (DaemonSet: from spec.nodeName)")
	fs.StringVar(&c.ZtunnelSocket, "ztunnel-socket", c.ZtunnelSocket, "Unix socket ztunnel connects to (ZDS protocol)")
	fs.DurationVar(&c.SnapshotHold, "ztunnel-snapshot-hold", c.SnapshotHold, "after start-up, how long ztunnel's snapshot may wait for the runtime's pods to be listed: ztunnel drains every pod a snapshot leaves out, so the snapshot names the pods that run; meanwhile ztunnel keeps proxying the pods it has")
	fs.Var(flagvalue.NewEnum(&c.Mode, "mode", ModeAuto, ModeNRI, ModeCNI), "mode", "how pods reach meshlet: nri (the runtime's NRI hooks), cni (the chained meshlet-cni plugin, for runtimes without NRI) or auto (nri when the NRI socket answers, else cni once the runtime answers on CRI)")
	fs.BoolVar(&c.Standalone, "standalone", c.Standalone, "run without an API server: only pods' own labels select them, service accounts are reported as "+strconv.Quote(enroll.DefaultServiceAccount)+", no status annotation")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file for the API server (default: in-cluster service account)")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "directory for meshlet's state on the node: checkpoint.json (the enrolled pods, so that a restarted meshlet adopts their rules), claims.json (prepared mesh claims), node-settings.json (the last good --config-map documents) and meshlet.lock (held by the meshlet serving the node)")
	fs.StringVar(&c.HealthAddr, "health-addr", c.HealthAddr, "address for /healthz and /readyz (empty: off)")
	fs.StringVar(&c.HealthSocket, "health-socket", c.HealthSocket, "Unix socket for /healthz and /readyz, served from start-up, also while waiting for another meshlet on the node to exit (meshlet probe reads it; the DaemonSet's probes use it); one per meshlet (empty: off)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "address for Prometheus /metrics (empty: off)")
	fs.BoolVar(&c.PodDefaults.DNSCapture, "dns-capture", c.PodDefaults.DNSCapture, "redirect pods' DNS to ztunnel by default (per pod: annotation ambient.istio.io/dns-capture)")
	fs.StringVar(&c.PodName, "pod-name", c.PodName, "meshlet's own pod name (DaemonSet: downward API metadata.name); a stop removes meshlet's state from the node (meshlet-cni, node rules, state files, ResourceSlices) only when this pod's DaemonSet is deleted")
	fs.StringVar(&c.PodNamespace, "pod-namespace", c.PodNamespace, "meshlet's own pod namespace (DaemonSet: downward API metadata.namespace)")
	fs.BoolVar(&c.UnmeshOnUninstall, "unmesh-on-uninstall", c.UnmeshOnUninstall, "when meshlet's DaemonSet is deleted (needs --pod-name), take every pod out of the mesh before exiting: ztunnel Del, in-pod rules removed (default: running pods keep their rules until they stop)")
	fs.BoolVar(&c.SkipPodIPCheck, "skip-pod-ip-check", c.SkipPodIPCheck, "enroll a mesh pod even when its network namespace does not hold the IPs the runtime reports (by default such a pod is refused: the runtime named the wrong namespace); only for a CNI that keeps pod IPs outside the pod's namespace")
	fs.Var(kube.ObjectRefList{Dst: &c.ConfigMaps}, "config-map", "NAMESPACE/NAME of a ConfigMap whose "+nodesettings.DataKey+" is a "+nodesettings.APIVersion+" "+nodesettings.Kind+" document: its settings replace the flags' while meshlet runs, and a change applies at once; repeat the flag (or separate with commas) for several, a later one winning")
	fs.StringVar(&c.NodeTaint, "node-taint", c.NodeTaint, "key of a NoSchedule taint meshlet keeps on its node while the node's mesh cannot take new pods (runtime hook or ztunnel not connected, meshlet stopping) and removes once it can; mesh pods must not tolerate it (empty: off)")
	fs.StringVar(&c.NodeCondition, "node-condition", c.NodeCondition, "type of a node condition meshlet keeps True while the node's mesh can take new pods and False while it cannot, for the Node Readiness Controller (empty: off)")
	fs.Var(logVerbosity{&c.LogVerbosity}, "v", fmt.Sprintf("log verbosity, 0 to %d (a node setting: --config-map may change it)", nodesettings.MaxLogVerbosity))
	fs.Var(flagvalue.NewEnum(&c.LogFormat, "log-format", logformat.Formats...), "log-format", "log format: text (klog's) or json (one object per line, as Kubernetes components write it with --logging-format=json)")
	c.NRI.AddFlags(fs)
	c.Redirect.AddFlags(fs)
	c.Policy.AddFlags(fs)
	c.DRA.AddFlags(fs)
	c.CNI.AddFlags(fs)
}

// Validate reports the first setting that cannot work, naming its flag.
func (c *Config) Validate() error {
	if c.ZtunnelSocket == "" {
		return errors.New("--ztunnel-socket must not be empty")
	}
	if c.SnapshotHold < time.Second || c.SnapshotHold > 10*time.Minute {
		return fmt.Errorf("--ztunnel-snapshot-hold=%v: must be between 1s and 10m", c.SnapshotHold)
	}
	if err := nodesettings.CheckLabelKey(c.Policy.DataplaneModeLabel); err != nil {
		return fmt.Errorf("--dataplane-mode-label: %w", err)
	}
	// Names that no namespace or RuntimeClass can have would match nothing
	// (and CNI mode's installer refuses such namespaces when it starts).
	for _, l := range []struct {
		flag  string
		names []string
	}{{"--excluded-namespaces", c.Policy.ExcludedNamespaces}, {"--denied-runtime-handlers", c.Policy.DeniedRuntimeHandlers}} {
		for _, name := range l.names {
			if err := nodesettings.CheckName(name); err != nil {
				return fmt.Errorf("%s: %w", l.flag, err)
			}
		}
	}
	if err := nodesettings.CheckLogVerbosity(c.LogVerbosity); err != nil {
		return fmt.Errorf("-v: %w", err)
	}
	for i, ref := range c.ConfigMaps {
		if slices.Index(c.ConfigMaps, ref) < i {
			return fmt.Errorf("--config-map=%s: given twice", ref)
		}
	}
	if len(c.ConfigMaps) > 0 && c.Standalone {
		return errors.New("--config-map needs the API server: drop --standalone (or the ConfigMaps)")
	}
	if err := c.validateRevision(); err != nil {
		return err
	}
	if err := c.validateNodeReadiness(); err != nil {
		return err
	}
	if c.StateDir == "" {
		return errors.New("--state-dir must not be empty")
	}
	if c.NRI.SocketPath == "" {
		return errors.New("--nri-socket must not be empty")
	}
	for _, s := range []struct{ flag, path string }{{"--ztunnel-socket", c.ZtunnelSocket}, {"--nri-socket", c.NRI.SocketPath}, {"--cni-socket", c.CNI.Socket}, {"--health-socket", c.HealthSocket}, {"--gate-socket", c.DRA.Gate.Socket}} {
		if len(s.path) > maxSocketPath {
			return fmt.Errorf("%s=%q is %d bytes, longer than the %d a Unix socket path may have (sun_path is %d bytes, NUL included)",
				s.flag, s.path, len(s.path), maxSocketPath, maxSocketPath+1)
		}
	}
	if len(c.NRI.Index) != 2 || c.NRI.Index[0] < '0' || c.NRI.Index[0] > '9' || c.NRI.Index[1] < '0' || c.NRI.Index[1] > '9' {
		return fmt.Errorf("--nri-plugin-index=%q: want two digits, e.g. 10", c.NRI.Index)
	}
	if err := nodesettings.CheckEnrollTimeout(c.NRI.EnrollTimeout); err != nil {
		return fmt.Errorf("--enroll-timeout=%w", err)
	}
	if err := c.CNI.Validate(); err != nil {
		return err
	}
	if c.Mode == ModeCNI && c.Standalone {
		return errors.New("--mode=cni needs the API server (CNI passes no pod labels to select pods by): drop --standalone")
	}
	if (c.PodName == "") != (c.PodNamespace == "") {
		return fmt.Errorf("--pod-name=%q and --pod-namespace=%q: set both or neither", c.PodName, c.PodNamespace)
	}
	if !c.Standalone && c.NodeName == "" {
		return errors.New("--node-name is required (meshlet watches this node's pods); or run with --standalone")
	}
	for flagName, addr := range map[string]string{"--health-addr": c.HealthAddr, "--metrics-addr": c.MetricsAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s=%q: %w", flagName, addr, err)
		}
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if !c.Standalone {
		if err := c.DRA.Validate(); err != nil {
			return err
		}
	}
	// Last: the only check that looks at the node's filesystem.
	if err := checkStateDir(c.StateDir); err != nil {
		return fmt.Errorf("--state-dir=%q: %w", c.StateDir, err)
	}
	return nil
}

// maxSocketPath is the longest Unix socket path bind and connect take:
// sun_path (108 bytes on Linux) holds it and its terminating NUL. Longer
// paths fail late with a bare "invalid argument".
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// checkStateDir refuses a state directory the checkpoint writer could never
// use, which would otherwise fail on every write while pods run unsaved.
// A missing directory is fine (it is created) if its nearest existing
// ancestor is a writable directory.
func checkStateDir(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if (errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR)) && filepath.Dir(p) != p {
			continue // created on start-up: look at what it is created in
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			if p == filepath.Clean(dir) {
				return errors.New("exists and is not a directory")
			}
			return fmt.Errorf("cannot be created: %s is not a directory", p)
		}
		// W_OK also catches a read-only mount, which root is not exempt from.
		if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
			return fmt.Errorf("%s is not writable: %w", p, err)
		}
		return nil
	}
}

// defaultPolicy is Istio's selection, every revision's pods.
func defaultPolicy() policy.Config {
	p := policy.Defaults()
	p.RevisionlessPods = policy.RevisionlessDefaultTag
	return p
}

// validateRevision checks --revision and what it cannot run with.
func (c *Config) validateRevision() error {
	rev := c.Policy.Revision
	if rev == "" {
		if c.Policy.RevisionlessPods != policy.RevisionlessDefaultTag {
			return fmt.Errorf("--revisionless-pods=%s needs --revision", c.Policy.RevisionlessPods)
		}
		return nil
	}
	if errs := validation.IsDNS1123Label(rev); len(errs) > 0 {
		return fmt.Errorf("--revision=%q is not a revision name: %s", rev, strings.Join(errs, "; "))
	}
	if len(rev) > redirect.MaxInstanceLen {
		return fmt.Errorf("--revision=%q: at most %d characters (it names the node's rules of this meshlet)", rev, redirect.MaxInstanceLen)
	}
	switch {
	case c.Standalone:
		return errors.New("--revision needs the API server (namespaces' labels, Istio's revision tags): drop --standalone")
	case c.Mode == ModeCNI:
		return errors.New("--revision needs NRI (--mode=nri or auto): in CNI mode one meshlet-cni in the runtime's chain serves the node")
	case c.DRA.Enabled:
		return errors.New("--revision needs --dra=false: the DRA plugin publishes the node's one mesh device, for one meshlet per node")
	}
	return nil
}

// validateNodeReadiness checks --node-taint and --node-condition.
func (c *Config) validateNodeReadiness() error {
	for _, f := range []struct{ flag, value string }{{"--node-taint", c.NodeTaint}, {"--node-condition", c.NodeCondition}} {
		if f.value == "" {
			continue
		}
		if errs := validation.IsQualifiedName(f.value); len(errs) > 0 {
			return fmt.Errorf("%s=%q: %s", f.flag, f.value, strings.Join(errs, "; "))
		}
		if c.Standalone {
			return fmt.Errorf("%s needs the API server: drop --standalone", f.flag)
		}
		if c.Policy.Revision != "" {
			// Two revisions' meshlets on a node would undo each other's
			// writes.
			return fmt.Errorf("%s with --revision: a node has one mesh taint (or condition), for the meshlet without a revision", f.flag)
		}
	}
	return nil
}

// CNIExcluded are the namespaces meshlet-cni's entry lets start while
// meshlet is away: the excluded namespaces and ztunnel's, so the mesh's
// own infrastructure can come up on a node without an agent.
func (c Config) CNIExcluded() []string {
	return append(slices.Clone(c.Policy.ExcludedNamespaces), c.Policy.ZtunnelNamespace)
}
