#!/usr/bin/env bash
# Builds what a single-node cluster adds to the API tests' control plane:
# kube-controller-manager, kube-scheduler and kubelet, from the Go module
# proxy, in the same throwaway module test/kube/install.sh uses (never in
# this repository). Cached by version: a later run, or a fresh clone on the
# same machine, reuses the binaries. Cold, after test/kube/install.sh has
# filled the Go build cache: ~6 minutes on 2 cores, ~2.5 GB of RAM at link
# time. Prints the bin directory on the last line; it also holds etcd and
# kube-apiserver.
set -euo pipefail
cd "$(dirname "$0")/../.."

K8S_VERSION=v1.37.2
CACHE="${MESHLET_CACHE:-$HOME/.cache/meshlet}"
KUBE_BIN="$(test/kube/install.sh | tail -n 1)"
# Keyed like the control plane's directory (etcd and Kubernetes versions):
# it holds a copy of that etcd and kube-apiserver, and the same Kubernetes.
case "$(basename "$KUBE_BIN")" in
*-k8s-"$K8S_VERSION") ;;
*)
  echo "cluster install: test/kube/install.sh built $(basename "$KUBE_BIN"), not Kubernetes $K8S_VERSION: set the same K8S_VERSION in both" >&2
  exit 1
  ;;
esac
BIN="$CACHE/cluster-bin/$(basename "$KUBE_BIN")"
WORK="$CACHE/kube-build/k8s" # prepared by test/kube/install.sh

if [ -x "$BIN/kubelet" ] && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-controller-manager" ]; then
  echo "$BIN"
  exit 0
fi
cd "$WORK"
# The module is test/kube/install.sh's too: one build in it at a time.
exec 9>"$WORK/../.lock"
flock 9
if [ -x "$BIN/kubelet" ] && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-controller-manager" ]; then
  echo "$BIN"
  exit 0
fi
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
pkgs=(k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet)
echo "cluster install: building kube-controller-manager, kube-scheduler and kubelet $K8S_VERSION" >&2
# One go get and one go build: the three share most packages and link side
# by side (-o with several packages names a directory).
go get "${pkgs[@]/%/@$K8S_VERSION}" >&2
CGO_ENABLED=0 go build -gcflags=all=-dwarf=false -ldflags "$ldflags" -o "$BIN.tmp/" "${pkgs[@]}"
cp "$KUBE_BIN/etcd" "$KUBE_BIN/kube-apiserver" "$BIN.tmp/"
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
echo "$BIN"
