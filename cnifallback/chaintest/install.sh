#!/usr/bin/env bash
# Installs the CNI plugins the chain tests run meshlet-cni behind: Debian's
# (containernetworking-plugins, in /usr/lib/cni: what the e2e runtime uses)
# and, for the spec versions Debian's do not speak (1.1.0), upstream's
# bridge, host-local and loopback, built from the Go module proxy once and
# cached outside the clone, keyed by version. Prints the upstream plugins'
# directory on the last line (MESHLET_CNI_PLUGINS).
set -euo pipefail

PLUGINS_VERSION=v1.6.2
CACHE="${MESHLET_CACHE:-$HOME/.cache/meshlet}"
BIN="$CACHE/tools/cni-plugins-$PLUGINS_VERSION"

if [ ! -x /usr/lib/cni/bridge ]; then
  echo "chaintest install: apt-get install containernetworking-plugins" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends containernetworking-plugins >/dev/null
fi

if [ ! -x "$BIN/bridge" ] || [ ! -x "$BIN/host-local" ] || [ ! -x "$BIN/loopback" ]; then
  echo "chaintest install: building CNI plugins $PLUGINS_VERSION" >&2
  mkdir -p "$BIN.tmp"
  m=github.com/containernetworking/plugins/plugins
  CGO_ENABLED=0 GOBIN="$BIN.tmp" go install -trimpath -gcflags=all=-dwarf=false \
    "$m/main/bridge@$PLUGINS_VERSION" "$m/ipam/host-local@$PLUGINS_VERSION" "$m/main/loopback@$PLUGINS_VERSION"
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
fi
echo "$BIN"
