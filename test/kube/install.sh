#!/usr/bin/env bash
# Builds the Kubernetes control plane the API tests run against: etcd and
# kube-apiserver, from the Go module proxy, in one throwaway module under
# the cache (never in this repository). etcd is the version whose client
# Kubernetes requires, built in the same module: the two share most of
# their dependencies, compiled once. Cached by version: a later run, or a
# fresh clone on the same machine, reuses the binaries. Cold: ~8 minutes on
# 2 cores, ~2.5 GB of RAM at link time. Prints the bin directory on the
# last line.
set -euo pipefail

K8S_VERSION=v1.37.2
K8S_STAGING_VERSION=v0.37.2
# The go.etcd.io/etcd/client/v3 version k8s.io/kubernetes $K8S_VERSION requires.
ETCD_VERSION=v3.7.0
CACHE="${MESHLET_CACHE:-$HOME/.cache/meshlet}"
BIN="$CACHE/kube-bin/etcd-$ETCD_VERSION-k8s-$K8S_VERSION"
WORK="$CACHE/kube-build"

if [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-apiserver" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$WORK"
# One build at a time: test/cluster/install.sh runs this script too, and
# make test runs both side by side.
exec 9>"$WORK/.lock"
flock 9
if [ -x "$BIN/etcd" ] && [ -x "$BIN/kube-apiserver" ]; then
  echo "$BIN"
  exit 0
fi
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp" "$WORK/k8s"

echo "kube install: building kube-apiserver $K8S_VERSION and etcd $ETCD_VERSION" >&2
cd "$WORK/k8s"
k8smod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
etcdclient=$(sed -n 's#^\s*go.etcd.io/etcd/client/v3 \(v[0-9.]*\).*#\1#p' "$k8smod")
if [ "$etcdclient" != "$ETCD_VERSION" ]; then
  echo "kube install: k8s.io/kubernetes $K8S_VERSION requires etcd client $etcdclient, not $ETCD_VERSION: set ETCD_VERSION to it" >&2
  exit 1
fi
{
  echo "module meshlet.local/k8sbuild"
  echo
  echo "go 1.26"
  echo
  echo "replace ("
  # Every staging module Kubernetes replaces with ./staging/src/..., pinned
  # to its published version (the proxy refuses the two sample modules,
  # which nothing here needs).
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$k8smod" |
    grep -v -e sample-cli-plugin -e sample-controller |
    while read -r m; do echo "	$m => $m $K8S_STAGING_VERSION"; done
  echo ")"
} > go.mod
go get "k8s.io/kubernetes@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
CGO_ENABLED=0 go build -gcflags=all=-dwarf=false -ldflags "$ldflags" -o "$BIN.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
CGO_ENABLED=0 go build -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$BIN.tmp/etcd" go.etcd.io/etcd/server/v3

rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
echo "$BIN"
