#!/usr/bin/env bash
# Installs Istio's own node agent and CNI plugin (istio-cni: install-cni,
# which serves ztunnel's socket and installs the plugin, and istio-cni, the
# chained plugin), the agent a node meshlet takes over runs before it.
# Both build from the Go module proxy (istio.io/istio at ISTIO_VERSION, in
# hack/thirdparty.sh) in a module of their own under the cache, static,
# with Istio's release build tags (agent: the node agent's subset of
# Istio); once, keyed by version and by this recipe. Prints the bin
# directory on the last line; with --download, only downloads what the
# build needs, and prints nothing.
set -euo pipefail
. "$(dirname "$0")/../../hack/thirdparty.sh"

BIN="$THIRDPARTY_CACHE/e2e-bin/istio-cni-$ISTIO_VERSION-$(sha256sum "$0" | cut -c1-12)"
thirdparty_own_go_install "$BIN" "istio.io/istio@$ISTIO_VERSION" "agent,disable_pgv,grpcnotrace,retrynotrace" \
  istio.io/istio/cni/cmd/install-cni istio.io/istio/cni/cmd/istio-cni "$@"
