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
The platforms: the layout of each kind of node (host paths) and what else
it needs. deploy/README.md, "Platforms", is their table; every platform is
rendered to testdata/<platform>.yaml and dry-run by the API server in the
chart tests.

- "" (kubeadm-style nodes with containerd 2.x, which has NRI on by
  default): containerd's socket, /etc/cni/net.d, /opt/cni/bin,
  /var/lib/kubelet.
- crio: CRI-O's socket (/var/run/crio/crio.sock; its NRI listens on
  /var/run/nri/nri.sock once enable_nri is set); the rest as "".
- gke: containerd, CNI plugins in /home/kubernetes/bin (where GKE's
  kubelet and containerd look), and a ResourceQuota that admits
  system-node-critical pods outside kube-system, which GKE refuses
  otherwise. Picked by itself on a cluster whose version carries "-gke".
- eks: the layout of "" (the VPC CNI's files are in /etc/cni/net.d and
  /opt/cni/bin). Picked by itself on a version carrying "-eks".
- openshift: CRI-O; Multus's configuration directory
  /etc/kubernetes/cni/net.d and plugins in /var/lib/cni/bin; the
  container's SELinux type spc_t (a container_t process may not setns into
  another pod's network namespace or write host directories); the
  privileged SecurityContextConstraints for the service account. Picked by
  itself where the API serves security.openshift.io/v1.
- kind: the layout of "" (kind's node image runs containerd 2.x).
- k3s: the embedded containerd's socket /run/k3s/containerd/containerd.sock
  (k3s pkg/agent/config: state dir /run/k3s/containerd); CNI configuration
  in <data-dir>/agent/etc/cni/net.d, data-dir /var/lib/rancher/k3s; plugins
  in /var/lib/rancher/k3s/data/cni, the stable directory current k3s puts
  first on containerd's bin_dir ("so that users have a consistent location
  to drop their own CNI plugin binaries", k3s cmd/k3s/main.go; Istio's k3s
  profile moved there from data/current/bin for that reason). Releases
  from before it searched /var/lib/rancher/k3s/data/current/bin: check with
  `grep bin_dir /var/lib/rancher/k3s/agent/etc/containerd/config.toml`.
  k3s embeds containerd 2.x (NRI on) since v1.31.6+k3s1 and v1.32.2+k3s1.
  Picked by itself on a version carrying "+k3s".
- k3d: k3s in a container: k3s's layout, plugins in /bin (the k3s image
  keeps them there; Istio's k3d profile).
- microk8s: the snap's paths: containerd at
  /var/snap/microk8s/common/run/containerd.sock, CNI configuration in
  /var/snap/microk8s/current/args/cni-network, plugins in
  /var/snap/microk8s/current/opt/cni/bin, the kubelet's root
  /var/snap/microk8s/common/var/lib/kubelet.
- minikube (with --container-runtime=containerd; the docker runtime has no
  NRI and no CNI chain meshlet can join): CNI configuration in
  /etc/cni/net.mk, where minikube points containerd; the rest as "".
*/}}
{{- define "meshlet.platforms" -}}
"":
  paths: &default
    nriSocket: /var/run/nri/nri.sock
    criSocket: /run/containerd/containerd.sock
    cniConfDir: /etc/cni/net.d
    cniBinDir: /opt/cni/bin
    kubeletDir: /var/lib/kubelet
crio:
  paths: &crio
    nriSocket: /var/run/nri/nri.sock
    criSocket: /var/run/crio/crio.sock
    cniConfDir: /etc/cni/net.d
    cniBinDir: /opt/cni/bin
    kubeletDir: /var/lib/kubelet
gke:
  paths:
    nriSocket: /var/run/nri/nri.sock
    criSocket: /run/containerd/containerd.sock
    cniConfDir: /etc/cni/net.d
    cniBinDir: /home/kubernetes/bin
    kubeletDir: /var/lib/kubelet
  resourceQuota: true
eks:
  paths: *default
openshift:
  paths:
    nriSocket: /var/run/nri/nri.sock
    criSocket: /var/run/crio/crio.sock
    cniConfDir: /etc/kubernetes/cni/net.d
    cniBinDir: /var/lib/cni/bin
    kubeletDir: /var/lib/kubelet
  seLinuxType: spc_t
  securityContextConstraints: privileged
kind:
  paths: *default
k3s:
  paths:
    nriSocket: /var/run/nri/nri.sock
    criSocket: /run/k3s/containerd/containerd.sock
    cniConfDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
    cniBinDir: /var/lib/rancher/k3s/data/cni
    kubeletDir: /var/lib/kubelet
k3d:
  paths:
    nriSocket: /var/run/nri/nri.sock
    criSocket: /run/k3s/containerd/containerd.sock
    cniConfDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
    cniBinDir: /bin
    kubeletDir: /var/lib/kubelet
microk8s:
  paths:
    nriSocket: /var/run/nri/nri.sock
    criSocket: /var/snap/microk8s/common/run/containerd.sock
    cniConfDir: /var/snap/microk8s/current/args/cni-network
    cniBinDir: /var/snap/microk8s/current/opt/cni/bin
    kubeletDir: /var/snap/microk8s/common/var/lib/kubelet
minikube:
  paths:
    nriSocket: /var/run/nri/nri.sock
    criSocket: /run/containerd/containerd.sock
    cniConfDir: /etc/cni/net.mk
    cniBinDir: /opt/cni/bin
    kubeletDir: /var/lib/kubelet
{{- end -}}

{{/*
meshlet.platform: the platform's name. platform wins, then Istio's
global.platform, then profile (its old name); containerd names "" and
turns detection off. Unset, the cluster says where it can: a version
carrying -gke, -eks or +k3s (k3d's too: set k3d), or the OpenShift API.
helm template knows neither (--kube-version drops the suffix): GitOps tools
that render with it need platform set.
*/}}
{{- define "meshlet.platform" -}}
{{- $set := coalesce .Values.platform (.Values.global).platform .Values.profile | default "" -}}
{{- $version := .Capabilities.KubeVersion.GitVersion -}}
{{- if eq $set "containerd" -}}
{{- else if $set -}}
{{- $set -}}
{{- else if contains "-gke" $version -}}
gke
{{- else if contains "-eks" $version -}}
eks
{{- else if contains "+k3s" $version -}}
k3s
{{- else if .Capabilities.APIVersions.Has "security.openshift.io/v1" -}}
openshift
{{- end -}}
{{- end -}}

{{/*
meshlet.platformFacts: the platform's entry of meshlet.platforms, as YAML
(fromYaml it); an unknown platform fails, naming the known ones.
*/}}
{{- define "meshlet.platformFacts" -}}
{{- $platforms := include "meshlet.platforms" . | fromYaml -}}
{{- $name := include "meshlet.platform" . -}}
{{- if not (hasKey $platforms $name) -}}
{{- fail (printf "platform %q: want one of %s (empty: kubeadm-style nodes with containerd)" $name (keys $platforms | without "" | sortAlpha | join ", ")) -}}
{{- end -}}
{{- index $platforms $name | toYaml -}}
{{- end -}}

{{/*
meshlet.paths: every host path, the platform's defaults under the set
paths.* values, as YAML (fromYaml it).
*/}}
{{- define "meshlet.paths" -}}
{{- $profile := (include "meshlet.platformFacts" . | fromYaml).paths -}}
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
meshlet.dra: "true" when meshlet runs as a DRA driver: dra.enabled when it
is set; unset, where the API server serves resource.k8s.io/v1 (DeviceClass
is in it) and is Kubernetes >= 1.37 (the DeviceClass's
extendedResourceName), so that a first install on an older cluster does not
fail. The group version, not the kind: helm template, without a cluster,
knows the group versions of its Kubernetes release but no kinds.
*/}}
{{- define "meshlet.dra" -}}
{{- if kindIs "bool" .Values.dra.enabled -}}
{{- .Values.dra.enabled -}}
{{- else -}}
{{- and (.Capabilities.APIVersions.Has "resource.k8s.io/v1") (semverCompare ">=1.37.0-0" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}

{{/*
meshlet.serviceAccountName: the service account the DaemonSet runs as.
*/}}
{{- define "meshlet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "meshlet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: the existing service account meshlet runs as, with serviceAccount.create=false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
meshlet.image: repository:tag, or repository@digest when image.digest is
set (the tag is then only a label).
*/}}
{{- define "meshlet.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}
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
node-taint: nodeReadiness (mode, taintKey)
node-condition: nodeReadiness (mode, conditionType)
{{- end -}}

{{/*
meshlet.nodeReadiness: how the node's mesh readiness reaches the scheduler:
taint, condition or off (nodeReadiness.mode; "" is taint on Kubernetes >=
1.36, where admission can give pods outside the mesh the taint's
toleration, and off on older clusters and with config.revision).
*/}}
{{- define "meshlet.nodeReadiness" -}}
{{- $mode := .Values.nodeReadiness.mode | default "" -}}
{{- if and (has $mode (list "taint" "condition")) .Values.config.standalone -}}
{{- fail (printf "nodeReadiness.mode=%s needs the API server: set it off (or \"\") with config.standalone" $mode) -}}
{{- end -}}
{{- if and (has $mode (list "taint" "condition")) .Values.config.revision -}}
{{- fail (printf "nodeReadiness.mode=%s with config.revision: a node has one mesh taint, for the meshlet without a revision; set it off (or \"\") here" $mode) -}}
{{- end -}}
{{- if ne $mode "" -}}
{{- $mode -}}
{{- else if and (not .Values.config.revision) (not .Values.config.standalone) (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}
taint
{{- else -}}
off
{{- end -}}
{{- end -}}

{{/*
meshlet.nodeTaintKey and meshlet.nodeConditionType: nodeReadiness's taint
key and condition type, by default the DRA driver's name's (the mesh
device's taint has that key too).
*/}}
{{- define "meshlet.nodeTaintKey" -}}
{{- .Values.nodeReadiness.taintKey | default (printf "%s/not-ready" .Values.dra.driverName) -}}
{{- end -}}
{{- define "meshlet.nodeConditionType" -}}
{{- .Values.nodeReadiness.conditionType | default (printf "%s/MeshReady" .Values.dra.driverName) -}}
{{- end -}}

{{/*
meshlet.tolerateOutsideMesh: whether the chart's MutatingAdmissionPolicy
gives pods outside the mesh the node taint's toleration.
*/}}
{{- define "meshlet.tolerateOutsideMesh" -}}
{{- $mode := include "meshlet.nodeReadiness" . -}}
{{- if and (ne $mode "off") .Values.nodeReadiness.tolerateOutsideMesh -}}
{{- if not (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "nodeReadiness.tolerateOutsideMesh needs Kubernetes >= 1.36 (MutatingAdmissionPolicy), the cluster is %s: set it false and give the pods that need not wait a toleration of %s yourself, or set nodeReadiness.mode=off" .Capabilities.KubeVersion.Version (include "meshlet.nodeTaintKey" .)) -}}
{{- end -}}
true
{{- else -}}
false
{{- end -}}
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

{{/*
meshlet.securityContext: the container's securityContext, the platform's
SELinux type (OpenShift: spc_t) unless securityContext.seLinuxOptions is
set; as YAML.
*/}}
{{- define "meshlet.securityContext" -}}
{{- $sc := deepCopy (.Values.securityContext | default dict) -}}
{{- $type := (include "meshlet.platformFacts" . | fromYaml).seLinuxType -}}
{{- if and $type (not $sc.seLinuxOptions) -}}
{{- $_ := set $sc "seLinuxOptions" (dict "type" $type) -}}
{{- end -}}
{{- toYaml $sc -}}
{{- end -}}

{{/*
meshlet.goMemLimit: GOMEMLIMIT for the meshlet container, in bytes:
goMemLimitPercent of resources.limits.memory ("" without a limit, or with
goMemLimitPercent 0). The Go runtime then collects harder as its memory
nears the limit instead of growing the heap into an OOM kill; the rest of
the limit is left for what it does not count (the binary's pages, the
kernel's socket buffers).
*/}}
{{- define "meshlet.goMemLimit" -}}
{{- $limit := ((.Values.resources).limits).memory -}}
{{- $percent := int .Values.goMemLimitPercent -}}
{{- if and $limit (gt $percent 0) -}}
{{- /* A YAML number arrives as a float: written out whole, not as 1.3e+08. */ -}}
{{- $q := ternary (printf "%.0f" $limit) (toString $limit) (kindIs "float64" $limit) -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $suffix := trimPrefix $number $q -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if or (not $number) (not (hasKey $units $suffix)) -}}
{{- fail (printf "resources.limits.memory=%s: goMemLimitPercent needs a number of bytes, or of k, M, G, T, Ki, Mi, Gi, Ti (or set goMemLimitPercent to 0)" $q) -}}
{{- end -}}
{{- $bytes := floor (divf (mulf (float64 $number) (get $units $suffix) $percent) 100) -}}
{{- if lt $bytes 1.0 -}}
{{- fail (printf "resources.limits.memory=%s: under a byte at goMemLimitPercent=%d" $q $percent) -}}
{{- end -}}
{{- printf "%.0f" $bytes -}}
{{- end -}}
{{- end }}
