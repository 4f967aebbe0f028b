#!/usr/bin/env bash
# Installs containerd 1.7 (containerd, ctr and its runc shim), the older
# runtime the end-to-end matrix runs meshlet on: NRI is off by default there
# and its NRI is older (no validator). Built from the Go module proxy in a
# module of its own under the cache (hack/thirdparty.sh), once, keyed by
# version. Prints the bin directory on the last line; with --download,
# only downloads what the build needs, and prints nothing.
set -euo pipefail
. "$(dirname "$0")/../../hack/thirdparty.sh"

# Keyed by the version and by this recipe: a change to either builds anew.
BIN="$THIRDPARTY_CACHE/e2e-bin/containerd-$CONTAINERD17_VERSION-$(sha256sum "$0" | cut -c1-12)"
c=github.com/containerd/containerd/cmd
thirdparty_own_go_install "$BIN" "github.com/containerd/containerd@$CONTAINERD17_VERSION" "" \
  $c/containerd $c/ctr $c/containerd-shim-runc-v2 "$@"
