{{/*
The release's object name: the release name, or "<release>-meshlet" when the
release name does not contain the chart's (Helm's usual rule), capped at 63
characters (a DNS label).
*/}}
{{- define "meshlet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "meshlet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "meshlet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshlet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "meshlet.labels" -}}
{{ include "meshlet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | toString | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
Host paths per profile. A profile is the layout of a kind of node; each
paths.* value left empty takes its profile's, and a value that is set wins.

k3s (checked against k3s's source and docs):
- its embedded containerd listens on /run/k3s/containerd/containerd.sock
  (k3s pkg/agent/config/config_linux.go: state dir /run/k3s/containerd, the
  socket in it);
- the CNI configuration is <data-dir>/agent/etc/cni/net.d, data-dir
  /var/lib/rancher/k3s (k3s pkg/agent/config: CNIConfDir), the conf_dir k3s
  writes into its containerd config
  (/var/lib/rancher/k3s/agent/etc/containerd/config.toml);
- the CNI plugin directory containerd searches is the directory of the first
  host-local on k3s's PATH (pkg/agent/config: CNIBinDir). k3s puts
  /var/lib/rancher/k3s/data/cni first on that PATH, "a stable CNI bin dir ...
  so that users have a consistent location to drop their own CNI plugin
  binaries" (k3s cmd/k3s/main.go), so current k3s configures containerd with
  bin_dir = /var/lib/rancher/k3s/data/cni (Istio's k3s profile,
  manifests/helm-profiles/platform-k3s.yaml, moved there from
  data/current/bin for that reason). Releases from before that directory
  existed searched /var/lib/rancher/k3s/data/current/bin: set
  paths.cniBinDir to it there. Check with
  `grep bin_dir /var/lib/rancher/k3s/agent/etc/containerd/config.toml`;
- the kubelet keeps its default --root-dir, /var/lib/kubelet;
- NRI: k3s embeds containerd 2.x since its February 2025 releases
  (v1.31.6+k3s1, v1.32.2+k3s1; docs.k3s.io "Advanced Options / Configuring
  containerd"), which has NRI on by default at /var/run/nri/nri.sock; with
  an older k3s (containerd 1.7) enable NRI through k3s's containerd config
  template (config.toml.tmpl in /var/lib/rancher/k3s/agent/etc/containerd/).
*/}}
{{- define "meshlet.profiles" -}}
containerd:
  nriSocket: /var/run/nri/nri.sock
  criSocket: /run/containerd/containerd.sock
  cniConfDir: /etc/cni/net.d
  cniBinDir: /opt/cni/bin
  kubeletDir: /var/lib/kubelet
k3s:
  nriSocket: /var/run/nri/nri.sock
  criSocket: /run/k3s/containerd/containerd.sock
  cniConfDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
  cniBinDir: /var/lib/rancher/k3s/data/cni
  kubeletDir: /var/lib/kubelet
{{- end -}}

{{/*
meshlet.paths: every host path, the profile's defaults under the set
paths.* values, as YAML (fromYaml it).
*/}}
{{- define "meshlet.paths" -}}
{{- $profiles := include "meshlet.profiles" . | fromYaml -}}
{{- $profile := index $profiles .Values.profile -}}
{{- if not $profile -}}
{{- fail (printf "profile %q: want one of %s" .Values.profile (keys $profiles | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $paths := dict -}}
{{- range $k, $v := .Values.paths -}}
{{- if $v -}}{{- $_ := set $paths $k $v -}}{{- end -}}
{{- end -}}
{{- range $k, $v := $profile -}}
{{- if not (hasKey $paths $k) -}}{{- $_ := set $paths $k $v -}}{{- end -}}
{{- end -}}
{{- range $k, $v := $paths -}}
{{- if not (isAbs $v) -}}
{{- fail (printf "paths.%s=%q: want an absolute host path" $k $v) -}}
{{- end -}}
{{- end -}}
{{- toYaml $paths -}}
{{- end -}}

{{/*
Daemon flags the chart sets from values of their own (the mounts, ports and
downward API depend on them): config may not set them, and the error names
the value to use.
*/}}
{{- define "meshlet.ownedFlags" -}}
node-name: "nothing: the chart sets it to the pod's node (downward API spec.nodeName)"
pod-uid: "nothing: the chart sets it from the downward API (metadata.uid)"
pod-name: "nothing: the chart sets it from the downward API (metadata.name)"
pod-namespace: "nothing: the chart sets it from the downward API (metadata.namespace)"
health-addr: health.address
health-socket: "nothing: the chart serves the probes on a socket in a per-pod emptyDir"
metrics-addr: metrics.address
state-dir: paths.stateDir
nri-socket: paths.nriSocket
ztunnel-socket: paths.ztunnelSocket
cri-socket: paths.criSocket
cni-conf-dir: paths.cniConfDir
cni-bin-dir: paths.cniBinDir
cni-socket: paths.cniSocket
kubelet-root-dir: paths.kubeletDir
dra: dra.enabled
dra-driver-name: dra.driverName
gate: dra.gate
cdi-spec-dir: paths.cdiSpecDir
gate-hook-dir: paths.gateHookDir
gate-socket: paths.gateSocket
config-map: nodeSettings (create, extraConfigMaps)
{{- end -}}

{{/*
meshlet.envValue: a config value as its environment variable's text: a
list joins with commas (the daemon's list flags), numbers and booleans as
JSON (so 3 is "3", not "3e+00"), strings as they are.
*/}}
{{- define "meshlet.envValue" -}}
{{- if kindIs "slice" . -}}
{{- join "," . -}}
{{- else if kindIs "string" . -}}
{{- . -}}
{{- else -}}
{{- toJson . -}}
{{- end -}}
{{- end -}}

{{/*
meshlet.envName: MESHLET_ + the flag name in upper case, - as _ (the
daemon's agent.EnvName).
*/}}
{{- define "meshlet.envName" -}}
{{- printf "MESHLET_%s" (. | upper | replace "-" "_") -}}
{{- end -}}

{{/*
meshlet.port: the port of an address value (host:port), failing with the
value's name when it has none; takes (dict "value" NAME "address" ADDR).
*/}}
{{- define "meshlet.port" -}}
{{- if not (regexMatch ":[0-9]+$" .address) -}}
{{- fail (printf "%s=%q: want host:port" .value .address) -}}
{{- end -}}
{{- regexFind "[0-9]+$" .address -}}
{{- end -}}

{{/*
meshlet.socketDirs is the directories of the sockets meshlet uses, as a YAML
list of {name, path}, each directory once: a node may keep two of them in
one directory (and Kubernetes refuses two mounts at one path).
*/}}
{{- define "meshlet.socketDirs" -}}
{{- $paths := include "meshlet.paths" . | fromYaml -}}
{{- $seen := dict -}}
{{- $out := list -}}
{{- range $d := list (list "nri" $paths.nriSocket) (list "ztunnel" $paths.ztunnelSocket) (list "cni-socket" $paths.cniSocket) (list "gate-socket" $paths.gateSocket) (list "cri" $paths.criSocket) -}}
{{- $path := dir (index $d 1) -}}
{{- if not (hasKey $seen $path) -}}
{{- $_ := set $seen $path true -}}
{{- $out = append $out (dict "name" (index $d 0) "path" $path) -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
meshlet.settingsConfigMaps: the ConfigMaps meshlet reads its node settings
from (--config-map), as a YAML list of NAMESPACE/NAME: the chart's own
first (nodeSettings.create), then nodeSettings.extraConfigMaps. None
with config.standalone: meshlet reads ConfigMaps from the API server,
which a standalone meshlet does not use (and refuses --config-map).
*/}}
{{- define "meshlet.settingsConfigMaps" -}}
{{- $refs := list -}}
{{- if .Values.config.standalone -}}
{{- if .Values.nodeSettings.extraConfigMaps -}}
{{- fail "nodeSettings.extraConfigMaps needs the API server, and config.standalone is set: drop one of them" -}}
{{- end -}}
{{- else if .Values.nodeSettings.create -}}
{{- $refs = append $refs (printf "%s/%s-settings" .Release.Namespace (include "meshlet.fullname" .)) -}}
{{- end -}}
{{- range .Values.nodeSettings.extraConfigMaps -}}
{{- $refs = append $refs . -}}
{{- end -}}
{{- toYaml $refs -}}
{{- end -}}
