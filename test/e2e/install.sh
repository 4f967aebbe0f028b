#!/usr/bin/env bash
# Installs the real runtime the end-to-end tests drive: containerd 2.x (with
# NRI) and its runc shim, runc, the CNI plugins and crictl. Go binaries are
# built from the Go module proxy once and cached outside the clone, keyed by
# version, so later runs (and fresh clones on the same machine) reuse them.
# Prints the bin directory on the last line.
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
CRICTL_VERSION=v1.37.0
CACHE="${MESHLET_CACHE:-$HOME/.cache/meshlet}"
BIN="$CACHE/e2e-bin/containerd-$CONTAINERD_VERSION-crictl-$CRICTL_VERSION"

need=()
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
if ((${#need[@]})); then
  echo "e2e install: apt-get install ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ ! -x "$BIN/crictl" ] || [ ! -x "$BIN/containerd" ] || [ ! -x "$BIN/ctr" ] || [ ! -x "$BIN/containerd-shim-runc-v2" ]; then
  mkdir -p "$BIN.tmp"
  echo "e2e install: building containerd, ctr and containerd-shim-runc-v2 $CONTAINERD_VERSION (cold: a few minutes)" >&2
  m=github.com/containerd/containerd/v2/cmd
  # One go install: the three share most packages and link side by side.
  CGO_ENABLED=0 GOBIN="$BIN.tmp" go install -ldflags "-s -w" -gcflags=all=-dwarf=false \
    "$m/containerd@$CONTAINERD_VERSION" "$m/ctr@$CONTAINERD_VERSION" "$m/containerd-shim-runc-v2@$CONTAINERD_VERSION"
  echo "e2e install: building crictl $CRICTL_VERSION" >&2
  CGO_ENABLED=0 GOBIN="$BIN.tmp" go install -ldflags "-s -w" -gcflags=all=-dwarf=false "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
fi
echo "$BIN"
