package env

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Runtime is a container runtime an environment runs pods with.
type Runtime string

// The runtimes the end-to-end matrix runs meshlet on.
const (
	// Containerd is containerd 2.x (test/env/install-runtime.sh, MESHLET_E2E_BIN).
	Containerd Runtime = "containerd"
	// Containerd17 is containerd 1.7.x, whose NRI is off by default and
	// older (test/env/install-containerd17.sh, MESHLET_CONTAINERD17_BIN).
	Containerd17 Runtime = "containerd-1.7"
	// CRIO is CRI-O (test/env/install-crio.sh, MESHLET_CRIO_BIN).
	CRIO Runtime = "crio"
)

// runtimeKind is what differs between runtimes: their binaries, their
// configuration, how they start and how an image gets into them.
type runtimeKind struct {
	// binaries must be in Options.RuntimeBinDir.
	binaries []string
	// commands must be on PATH.
	commands []string
	// validator: the runtime's NRI can refuse containers while a
	// required plugin is absent (Options.RequiredPlugins).
	validator bool
	// writeConfig writes the runtime's configuration.
	writeConfig func(e *Env) error
	// argv is the runtime's command line.
	argv func(e *Env) []string
	// loadImage puts the OCI archive tar into the runtime's image store
	// as ref (containerd takes the name the archive carries), before the
	// runtime starts (CRI-O, for the environment's own image) or after
	// (containerd).
	loadImage   func(e *Env, tar, ref string) error
	imageBefore bool
	// netnsDir is where the runtime mounts pods' network namespaces.
	netnsDir func(e *Env) string
}

func kindOf(r Runtime) (*runtimeKind, error) {
	switch r {
	case Containerd, "":
		return &containerd2, nil
	case Containerd17:
		return &containerd17, nil
	case CRIO:
		return &crio, nil
	}
	return nil, fmt.Errorf("unknown runtime %q (known: %s, %s, %s)", r, Containerd, Containerd17, CRIO)
}

var containerd2 = runtimeKind{
	binaries:    []string{"containerd", "ctr", "containerd-shim-runc-v2"},
	validator:   true,
	writeConfig: writeContainerd2Config,
	argv:        containerdArgv,
	loadImage:   ctrImport,
	netnsDir:    func(e *Env) string { return e.path("state", "io.containerd.grpc.v1.cri", "netns") },
}

var containerd17 = runtimeKind{
	binaries:    []string{"containerd", "ctr", "containerd-shim-runc-v2"},
	writeConfig: writeContainerd17Config,
	argv:        containerdArgv,
	loadImage:   ctrImport,
	netnsDir:    func(e *Env) string { return e.path("state", "io.containerd.grpc.v1.cri", "netns") },
}

var crio = runtimeKind{
	binaries:    []string{"crio", "pinns"},
	commands:    []string{"conmon", "skopeo"},
	writeConfig: writeCRIOConfig,
	argv: func(e *Env) []string {
		// No drop-in directory: /etc/crio/crio.conf.d is the host's.
		return []string{e.runtimeBin("crio"), "--config", e.path("crio.conf"), "--config-dir", e.path("crio.conf.d")}
	},
	loadImage:   skopeoCopy,
	imageBefore: true,
	netnsDir:    func(e *Env) string { return e.path("crio", "ns", "netns") },
}

func (e *Env) runtimeBin(name string) string { return filepath.Join(e.opts.RuntimeBinDir, name) }

func containerdArgv(e *Env) []string {
	return []string{e.runtimeBin("containerd"), "--config", e.path("containerd.toml")}
}

func ctrImport(e *Env, tar, _ string) error {
	if out, err := e.ctr("images", "import", tar); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// validatorConfig is containerd 2.x's NRI default validator, requiring
// Options.RequiredPlugins.
func (e *Env) validatorConfig() string {
	if len(e.opts.RequiredPlugins) == 0 {
		return ""
	}
	q := make([]string, len(e.opts.RequiredPlugins))
	for i, p := range e.opts.RequiredPlugins {
		q[i] = fmt.Sprintf("%q", p)
	}
	return fmt.Sprintf(`
  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
    required_plugins = [%s]
    tolerate_missing_plugins_annotation = 'tolerate-missing-plugins.meshlet.dev'
`, strings.Join(q, ", "))
}

// writeContainerd2Config is containerd 2.x's configuration, every path
// private and as the node's processes see it (Options.NodeDir).
func writeContainerd2Config(e *Env) error {
	cfg := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [%[14]q]
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[12]q, '/usr/lib/cni']
    conf_dir = %[6]q
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[7]q
        SystemdCgroup = false
        Root = %[8]q

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[9]q

[plugins.'io.containerd.nri.v1.nri']
  disable = %[13]t
  socket_path = %[10]q
  plugin_request_timeout = '2s'
  plugin_registration_timeout = '5s'
%[11]s`, e.nodePath("root"), e.nodePath("state"), e.nodePath(criSocket), e.nodePath("ttrpc.sock"), e.nodePath("s"),
		e.nodePath(cniConfDir), mustLook("runc"), e.nodePath("runc"), Image, e.nodePath(nriSocket), e.validatorConfig(), e.nodePath(cniBinDir),
		e.opts.DisableNRI, e.nodePath(cdiSpecDir))
	return os.WriteFile(e.path("containerd.toml"), []byte(cfg), 0o644)
}

// writeContainerd17Config is containerd 1.7's configuration (version 2):
// CRI under io.containerd.grpc.v1.cri, NRI switched on (it is off by
// default), one CNI bin_dir (1.7 takes no list: the upstream plugins are
// linked into it). Its shims' sockets go under /run/containerd/s, named by
// a hash of this containerd's address, so they do not meet a node's.
func writeContainerd17Config(e *Env) error {
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		link := filepath.Join(e.CNIBinDir(), p)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("/usr/lib/cni", p), link); err != nil {
			return err
		}
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  sandbox_image = %[9]q
  enable_cdi = true
  cdi_spec_dirs = [%[12]q]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[11]q
    conf_dir = %[5]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[6]q
        SystemdCgroup = false
        Root = %[7]q

[plugins."io.containerd.nri.v1.nri"]
  disable = %[13]t
  socket_path = %[8]q
  plugin_path = %[10]q
  plugin_config_path = %[14]q
  plugin_request_timeout = "2s"
  plugin_registration_timeout = "5s"
`, e.path("root"), e.path("state"), e.CRISocket, e.path("ttrpc.sock"), e.CNIConfDir(),
		mustLook("runc"), e.path("runc"), e.NRISocket, Image, e.path("nri", "plugins"), e.CNIBinDir(),
		e.CDISpecDir(), e.opts.DisableNRI, e.path("nri", "conf.d"))
	return os.WriteFile(e.path("containerd.toml"), []byte(cfg), 0o644)
}

// writeCRIOConfig is CRI-O's configuration, every path private. CRI-O runs
// no pause process (drop_infra_ctr); pinns holds a pod's namespaces. Its
// runc is oomrunc: CRI-O gives its processes a negative oom_score_adj,
// which a machine without CAP_SYS_RESOURCE refuses, and has no setting to
// stop it; and it passes a kubelet's hugepage limits on to runc on a
// machine with no hugetlb hierarchy mounted.
func writeCRIOConfig(e *Env) error {
	for _, d := range []string{"crio.conf.d", "crio/nri/plugins", "crio/nri/conf.d"} {
		if err := os.MkdirAll(e.path(d), 0o755); err != nil {
			return err
		}
	}
	policy := `{"default": [{"type": "insecureAcceptAnything"}]}`
	if err := os.WriteFile(e.path("crio", "policy.json"), []byte(policy), 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`[crio]
root = %[1]q
runroot = %[2]q
storage_driver = "overlay"
log_dir = %[3]q
version_file = %[4]q
version_file_persist = %[5]q
clean_shutdown_file = %[6]q

[crio.api]
listen = %[7]q
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
namespaces_dir = %[8]q
pinns_path = %[9]q
container_exits_dir = %[10]q
container_attach_socket_dir = %[11]q
hooks_dir = []
cdi_spec_dirs = [%[12]q]
log_level = "info"

[crio.runtime.runtimes.runc]
runtime_path = %[13]q
runtime_type = "oci"
runtime_root = %[14]q
monitor_path = %[15]q

[crio.image]
pause_image = %[16]q
pause_command = "/pause"
signature_policy = %[17]q

[crio.network]
network_dir = %[18]q
plugin_dirs = [%[19]q, "/usr/lib/cni"]

[crio.nri]
enable_nri = %[20]t
nri_listen = %[21]q
nri_plugin_dir = %[22]q
nri_plugin_config_dir = %[23]q
nri_plugin_request_timeout = "2s"
nri_plugin_registration_timeout = "5s"
`, e.path("crio", "root"), e.path("crio", "run"), e.path("logs", "crio-pods"), e.path("crio", "run", "version"),
		e.path("crio", "root", "version"), e.path("crio", "root", "clean.shutdown"), e.CRISocket,
		e.path("crio", "ns"), e.runtimeBin("pinns"), e.path("crio", "run", "exits"), e.path("crio", "run", "attach"),
		e.CDISpecDir(), e.path("bin", "oomrunc"), e.path("runc"), mustLook("conmon"), Image, e.path("crio", "policy.json"),
		e.CNIConfDir(), e.CNIBinDir(), !e.opts.DisableNRI, e.NRISocket, e.path("crio", "nri", "plugins"), e.path("crio", "nri", "conf.d"))
	return os.WriteFile(e.path("crio.conf"), []byte(cfg), 0o644)
}

// skopeoCopy copies the OCI archive into CRI-O's image store as ref, as a
// node without a registry would load an image.
func skopeoCopy(e *Env, tar, ref string) error {
	store := fmt.Sprintf("containers-storage:[overlay@%s+%s]%s", e.path("crio", "root"), e.path("crio", "run"), ref)
	out, err := exec.Command("skopeo", "--policy", e.path("crio", "policy.json"), "copy", "--quiet", "oci-archive:"+tar, store).CombinedOutput()
	if err != nil {
		return fmt.Errorf("skopeo copy %s: %w: %s", tar, err, out)
	}
	return nil
}
