#!/usr/bin/env bash
# Builds what a single-node cluster adds to the API tests' control plane:
# kube-controller-manager, kube-scheduler and kubelet, from the Go module
# proxy, in the third-party module hack/thirdparty.sh keeps under the cache.
# Cached by version: a later run, or a fresh clone on the same machine,
# reuses the binaries. Linking the three takes a few GB of RAM. Prints the
# bin directory on the last line; it also holds test/env/install-kube.sh's etcd
# and kube-apiserver.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/thirdparty.sh

# Before thirdparty_lock: that script takes it too.
KUBE_BIN="$(test/env/install-kube.sh | tail -n 1)"
BIN="$THIRDPARTY_CACHE/cluster-bin/$THIRDPARTY_KEY"

built() { [ -x "$BIN/kubelet" ] && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-controller-manager" ]; }
if built; then
  echo "$BIN"
  exit 0
fi
thirdparty_lock
if built; then # built while this waited
  echo "$BIN"
  exit 0
fi
echo "cluster install: building kube-controller-manager, kube-scheduler and kubelet $K8S_VERSION" >&2
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
k=k8s.io/kubernetes/cmd
thirdparty_build "$BIN.tmp" "$(k8s_version_ldflags)" \
  kube-controller-manager=$k/kube-controller-manager kube-scheduler=$k/kube-scheduler kubelet=$k/kubelet
cp "$KUBE_BIN/etcd" "$KUBE_BIN/kube-apiserver" "$BIN.tmp/"
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
echo "$BIN"
