#!/usr/bin/env bash
# Installs the real runtime the end-to-end tests drive: containerd 2.x (with
# NRI) and its runc shim, runc, the CNI plugins and crictl. runc and the
# CNI plugins come from Debian; the Go commands are built from the Go
# module proxy in the third-party module hack/thirdparty.sh keeps under the
# cache, once, keyed by version, so later runs (and fresh clones on the
# same machine) reuse them. Prints the bin directory on the last line.
set -euo pipefail
. "$(dirname "$0")/../../hack/thirdparty.sh"

BIN="$THIRDPARTY_CACHE/e2e-bin/$THIRDPARTY_KEY"

need=()
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
if ((${#need[@]})); then
  echo "e2e install: apt-get install ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

built() { [ -x "$BIN/crictl" ] && [ -x "$BIN/containerd" ] && [ -x "$BIN/ctr" ] && [ -x "$BIN/containerd-shim-runc-v2" ]; }
if ! built; then
  thirdparty_lock
fi
if ! built; then
  echo "e2e install: building containerd, ctr and containerd-shim-runc-v2 $CONTAINERD_VERSION and crictl $CRICTL_VERSION" >&2
  rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
  c=github.com/containerd/containerd/v2/cmd
  thirdparty_build "$BIN.tmp" "" \
    containerd=$c/containerd ctr=$c/ctr containerd-shim-runc-v2=$c/containerd-shim-runc-v2 \
    crictl=sigs.k8s.io/cri-tools/cmd/crictl
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
fi
echo "$BIN"
