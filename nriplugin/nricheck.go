package nriplugin

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/meshlet/meshlet/agent/cri"
)

// nriSettings says, per runtime, what to set for meshlet's NRI plugin;
// the same settings as deploy/runtime/.
var nriSettings = []struct{ runtime, versions, shown, file, snippet string }{
	{"containerd", "2.", "containerd 2.x", "/etc/containerd/config.toml (version = 3)", `[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '%[1]s'
  plugin_request_timeout = '2s'
  plugin_registration_timeout = '5s'
  # fail closed while meshlet is away (pods that must start without it
  # carry the annotation tolerate-missing-plugins.meshlet.dev: "true"):
  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
    required_plugins = ['meshlet']
    tolerate_missing_plugins_annotation = 'tolerate-missing-plugins.meshlet.dev'`},
	{"containerd", "1.7", "containerd 1.7", "/etc/containerd/config.toml (version = 2)", `[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "%[1]s"
  plugin_request_timeout = "2s"
  plugin_registration_timeout = "5s"`},
	{"cri-o", "", "CRI-O 1.26 or later", "/etc/crio/crio.conf.d/10-nri.conf", `[crio.nri]
enable_nri = true
nri_listen = "%[1]s"
nri_plugin_request_timeout = "2s"
nri_plugin_registration_timeout = "5s"`},
}

// CheckNRI reports whether the runtime's NRI socket (--nri-socket)
// answers (meshlet enable-nri, also an optional init container of the
// chart). If it does not, it names the runtime (from its CRI API at
// criSocket, --cri-socket) and prints exactly what to set in the runtime's
// configuration, and that the runtime must be restarted. It never edits
// the configuration: the runtime runs every pod on the node, and a change
// to it is the operator's to make.
func CheckNRI(ctx context.Context, socket, criSocket string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if Answers(ctx, socket) {
		fmt.Fprintf(w, "NRI is enabled: the runtime answers on %s.\n", socket)
		return nil
	}
	runtime, version := "", ""
	if l, err := cri.DialEndpoint(ctx, criSocket); err == nil {
		runtime, version = l.Runtime()
		l.Close()
	}
	if runtime == "" {
		fmt.Fprintf(w, "Nothing answers on the NRI socket %s, and no runtime answers on its CRI socket (--cri-socket).\n", socket)
	} else {
		fmt.Fprintf(w, "The runtime (%s %s) answers on CRI but not on the NRI socket %s: NRI is off, or listens elsewhere (--nri-socket).\n",
			runtime, version, socket)
	}
	printed := false
	for _, s := range nriSettings {
		if runtime != "" && (!strings.EqualFold(s.runtime, runtime) || !strings.HasPrefix(strings.TrimPrefix(version, "v"), s.versions)) {
			continue
		}
		fmt.Fprintf(w, "\nFor %s, in %s:\n\n%s\n", s.shown, s.file, fmt.Sprintf(s.snippet, socket))
		printed = true
	}
	if !printed {
		fmt.Fprintf(w, "\n%s %s has no NRI meshlet knows of: run meshlet in CNI mode (--mode cni, or auto).\n", runtime, version)
	}
	fmt.Fprintln(w, "\nthen restart the runtime (running containers keep running). Without NRI, --mode auto uses CNI mode.")
	return fmt.Errorf("NRI is not enabled (no answer on %s)", socket)
}

// Answers is whether something accepts connections on the NRI socket at
// path.
func Answers(ctx context.Context, path string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
