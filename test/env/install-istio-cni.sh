#!/usr/bin/env bash
# Installs Istio's own node agent and CNI plugin (istio-cni: install-cni,
# which serves ztunnel's socket and installs the plugin, and istio-cni, the
# chained plugin), the agent a node meshlet takes over runs before it.
# Both build from the Go module proxy (istio.io/istio at ISTIO_VERSION, in
# hack/thirdparty.sh) in a module of their own under the cache, static,
# with Istio's own build tags; once, keyed by version and by this recipe.
# Prints the bin directory on the last line; with --download, only
# downloads what the build needs, and prints nothing.
set -euo pipefail
. "$(dirname "$0")/../../hack/thirdparty.sh"

BIN="$THIRDPARTY_CACHE/e2e-bin/istio-cni-$ISTIO_VERSION-$(sha256sum "$0" | cut -c1-12)"
PKGS=(istio.io/istio/cni/cmd/install-cni istio.io/istio/cni/cmd/istio-cni)

built() { [ -x "$BIN/install-cni" ] && [ -x "$BIN/istio-cni" ]; }
mod="$THIRDPARTY_CACHE/thirdparty-build/istio-$ISTIO_VERSION"
if ! built; then
  thirdparty_own_module "$mod" "istio.io/istio@$ISTIO_VERSION" "${PKGS[@]}"
  if [ "${1:-}" = --download ]; then
    exit 0
  fi
  thirdparty_lock
fi
if ! built; then
  echo "istio-cni install: building install-cni and istio-cni at istio.io/istio $ISTIO_VERSION" >&2
  rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
  # Istio's release build: static, its tags (agent: the node agent's
  # subset of istio's code).
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" \
    -tags "agent,disable_pgv,grpcnotrace,retrynotrace" -o "$BIN.tmp/" "${PKGS[@]}")
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
fi
[ "${1:-}" = --download ] || echo "$BIN"
