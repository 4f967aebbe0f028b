# Sourced by the installers of the third-party commands the tests run
# (test/env/install-kube.sh, test/env/install-cluster.sh, test/env/install-runtime.sh,
# hack/install-helm.sh; and test/env/install-containerd17.sh,
# install-crio.sh and install-istio-cni.sh, which build in modules of
# their own): their versions,
# and the one Go module the first four are built in.
#
# Kubernetes, etcd, containerd, crictl and helm share most of their
# dependencies (Kubernetes' API and client libraries, gRPC, protobuf,
# OpenTelemetry, Prometheus). Built each in its own module they would
# resolve them to slightly different versions and compile each one several
# times over. Here one throwaway module under the cache (never in this
# repository) requires every command at its version, so each dependency
# resolves to one version (the newest any of them asks for) and compiles
# once, whichever installer runs first (all of them: 37 CPU-minutes from an
# empty build cache). Builds take turns (thirdparty_lock): on a small
# machine a build is CPU-bound, and one waiting on another reuses its work.
#
# What follows from one module:
# - a command's dependencies depend on every version below, so each
#   installer's cache directory is keyed by all of them (THIRDPARTY_KEY);
# - the first installer to run resolves and downloads every command's
#   modules, even make lint's helm alone, and a command that stops
#   resolving fails them all.

# Kubernetes: kube-apiserver (test/env/install-kube.sh); kubelet,
# kube-controller-manager and kube-scheduler (test/env/install-cluster.sh).
K8S_VERSION=v1.37.2
# The published version of its staging modules (k8s.io/api, client-go, …).
K8S_STAGING_VERSION=v0.37.2
# The go.etcd.io/etcd/client/v3 version Kubernetes requires: the etcd the
# control plane runs (test/env/install-kube.sh).
ETCD_VERSION=v3.7.0
# containerd, ctr, its runc shim and crictl (test/env/install-runtime.sh).
CONTAINERD_VERSION=v2.4.2
CRICTL_VERSION=v1.37.0
# helm (hack/install-helm.sh).
HELM_VERSION=v3.22.0

# The other runtimes the end-to-end matrix runs on. Each builds in a module
# of its own (thirdparty_own_module), not the shared one: they are older
# than the Kubernetes above, and built against its newer libraries they do
# not compile. containerd 1.7.x, the newest the proxy serves
# (test/env/install-containerd17.sh):
CONTAINERD17_VERSION=v1.7.35
# CRI-O (test/env/install-crio.sh); the proxy serves no newer one.
CRIO_VERSION=v1.34.0
# Istio's node agent and CNI plugin (istio-cni), the agent meshlet takes
# nodes over from (test/env/install-istio-cni.sh), in a module of its own:
# the pseudo-version of istio.io/istio the proxy serves (Istio 1.31's
# development branch; the module has no tagged releases).
ISTIO_VERSION=v0.0.0-20260827124520-eed52ebb66ad

# Absolute: builds run in the module's directory.
THIRDPARTY_CACHE="$(realpath -m "${MESHLET_CACHE:-$HOME/.cache/meshlet}")"
THIRDPARTY_KEY="k8s-$K8S_VERSION-etcd-$ETCD_VERSION-containerd-$CONTAINERD_VERSION-crictl-$CRICTL_VERSION-helm-$HELM_VERSION"
THIRDPARTY_MODULE="$THIRDPARTY_CACHE/thirdparty-build/$THIRDPARTY_KEY"

# thirdparty_lock waits for, then holds until the calling script exits, the
# one lock every third-party build takes. A script holding it must not run
# another installer: that one would wait for it forever.
thirdparty_lock() {
  mkdir -p "$THIRDPARTY_CACHE/thirdparty-build"
  exec 9>"$THIRDPARTY_CACHE/thirdparty-build/.lock"
  flock 9
}

# thirdparty_module prepares the module (once; under the lock).
thirdparty_module() {
  if [ -f "$THIRDPARTY_MODULE/.ready" ]; then
    return 0
  fi
  echo "thirdparty: resolving Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, containerd $CONTAINERD_VERSION, crictl $CRICTL_VERSION and helm $HELM_VERSION together" >&2
  rm -rf "$THIRDPARTY_MODULE" && mkdir -p "$THIRDPARTY_MODULE"
  local k8smod etcdclient
  k8smod=$(cd "$THIRDPARTY_MODULE" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  etcdclient=$(sed -n 's#^\s*go.etcd.io/etcd/client/v3 \(v[0-9.]*\).*#\1#p' "$k8smod")
  if [ "$etcdclient" != "$ETCD_VERSION" ]; then
    echo "thirdparty: k8s.io/kubernetes $K8S_VERSION requires etcd client $etcdclient, not $ETCD_VERSION: set ETCD_VERSION in hack/thirdparty.sh to it" >&2
    return 1
  fi
  {
    echo "module meshlet.local/thirdparty"
    echo
    echo "go 1.26"
    echo
    echo "replace ("
    # Every staging module Kubernetes replaces with ./staging/src/...,
    # pinned to its published version (the proxy refuses the two sample
    # modules, which nothing here needs).
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$k8smod" |
      grep -v -e sample-cli-plugin -e sample-controller |
      while read -r m; do echo "	$m => $m $K8S_STAGING_VERSION"; done
    echo ")"
  } > "$THIRDPARTY_MODULE/go.mod"
  local k=k8s.io/kubernetes/cmd c=github.com/containerd/containerd/v2/cmd
  (cd "$THIRDPARTY_MODULE" && go get \
    "k8s.io/kubernetes@$K8S_VERSION" \
    "$k/kube-apiserver@$K8S_VERSION" "$k/kube-controller-manager@$K8S_VERSION" \
    "$k/kube-scheduler@$K8S_VERSION" "$k/kubelet@$K8S_VERSION" \
    "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    "$c/containerd@$CONTAINERD_VERSION" "$c/ctr@$CONTAINERD_VERSION" "$c/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >&2
  touch "$THIRDPARTY_MODULE/.ready"
}

# thirdparty_build OUT_DIR LDFLAGS NAME=PACKAGE... builds each package into
# OUT_DIR/NAME, all in one go build (they compile and link side by side),
# static, without symbol tables or DWARF (nothing here debugs them; it
# compiles about 5% less), LDFLAGS added. Call it holding thirdparty_lock.
thirdparty_build() {
  local out=$1 ldflags=$2
  shift 2
  thirdparty_module
  local pkgs=() spec name pkg base
  for spec in "$@"; do pkgs+=("${spec#*=}"); done
  (cd "$THIRDPARTY_MODULE" &&
    CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w $ldflags" -o "$out/" "${pkgs[@]}")
  # go build names each binary after its package's last path element, or
  # the one before a major version suffix (go.etcd.io/etcd/server/v3:
  # server).
  for spec in "$@"; do
    name=${spec%%=*} pkg=${spec#*=} base=${pkg##*/}
    if [[ "$base" =~ ^v([2-9]|[1-9][0-9]+)$ ]]; then
      base=${pkg%/*} base=${base##*/}
    fi
    if [ "$base" != "$name" ]; then
      mv "$out/$base" "$out/$name"
    fi
  done
}

# k8s_version_ldflags are the link-time settings the Kubernetes commands
# report their version from (what kube-apiserver tells its clients).
k8s_version_ldflags() {
  local minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  echo "-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
}

# thirdparty_own_module DIR MODULE@VERSION PACKAGE... prepares (once) a
# throwaway module in DIR that requires MODULE@VERSION and imports each
# PACKAGE, with MODULE's own go.sum (its checksums, so that resolving needs
# no lookup the proxy might refuse) and its own dependency versions, each
# package's source downloaded. It holds a lock of DIR's own, not thirdparty_lock:
# preparing is downloading, which can overlap another's build (make test
# prepares these while the tests compile; the build comes much later).
thirdparty_own_module() {
  if [ -f "$1/.ready" ]; then
    return 0
  fi
  mkdir -p "$(dirname "$1")"
  (
    flock 8
    thirdparty_own_module_locked "$@"
  ) 8>"$1.lock"
}

thirdparty_own_module_locked() {
  local dir=$1 modver=$2
  shift 2
  if [ -f "$dir/.ready" ]; then
    return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  local src
  src=$(cd "$dir" && go mod download -json "$modver" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  if [ ! -d "$src" ]; then
    echo "thirdparty: go mod download $modver printed no directory" >&2
    return 1
  fi
  {
    echo "module meshlet.local/thirdparty-own"
    echo
    echo "go 1.26"
    echo
    echo "require ${modver%@*} ${modver#*@}"
  } >"$dir/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    local pkg
    for pkg in "$@"; do echo "import _ \"$pkg\""; done
  } >"$dir/tools.go"
  install -m 0644 "$src/go.sum" "$dir/go.sum"
  (cd "$dir" && go mod tidy) >&2
  touch "$dir/.ready"
}

# thirdparty_own_go_install BIN MODULE@VERSION TAGS PACKAGE... [--download]
# installs each PACKAGE of MODULE@VERSION into BIN (named after the
# package's last path element), built static, without symbol tables or
# DWARF, with the build tags TAGS (may be empty), in a module of its own
# (thirdparty_own_module), once; then prints BIN. With --download last, it
# only prepares the module (downloads), and prints nothing.
thirdparty_own_go_install() {
  local bin=$1 modver=$2 tags=$3
  shift 3
  local download=
  if [ "${*: -1}" = --download ]; then
    download=1
    set -- "${@:1:$#-1}"
  fi
  local mod="$THIRDPARTY_CACHE/thirdparty-build/$(basename "${modver%@*}")-${modver#*@}"
  local pkg built=1
  for pkg in "$@"; do [ -x "$bin/${pkg##*/}" ] || built=; done
  if [ -z "$built" ]; then
    thirdparty_own_module "$mod" "$modver" "$@"
    if [ -n "$download" ]; then
      return 0
    fi
    thirdparty_lock
    built=1
    for pkg in "$@"; do [ -x "$bin/${pkg##*/}" ] || built=; done
  fi
  if [ -z "$built" ]; then
    echo "thirdparty: building ${*##*/} at $modver" >&2
    rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
    (cd "$mod" && CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" \
      -tags "$tags" -o "$bin.tmp/" "$@")
    rm -rf "$bin" && mv "$bin.tmp" "$bin"
  fi
  [ -n "$download" ] || echo "$bin"
}

