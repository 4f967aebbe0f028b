#!/usr/bin/env bash
# Builds the Kubernetes control plane the API tests run against: etcd (the
# version whose client Kubernetes requires) and kube-apiserver, from the Go
# module proxy, in the third-party module hack/thirdparty.sh keeps under the
# cache. Cached by version: a later run, or a fresh clone on the same
# machine, reuses the binaries. Linking the two takes a few GB of RAM.
# Prints the bin directory on the last line.
set -euo pipefail
. "$(dirname "$0")/../../hack/thirdparty.sh"

BIN="$THIRDPARTY_CACHE/kube-bin/$THIRDPARTY_KEY"

built() { [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-apiserver" ]; }
if built; then
  echo "$BIN"
  exit 0
fi
thirdparty_lock
if built; then # built while this waited
  echo "$BIN"
  exit 0
fi
echo "kube install: building kube-apiserver $K8S_VERSION and etcd $ETCD_VERSION" >&2
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
thirdparty_build "$BIN.tmp" "$(k8s_version_ldflags)" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver etcd=go.etcd.io/etcd/server/v3
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
echo "$BIN"
