#!/usr/bin/env bash
# Builds istiorules (test/env/testdata/istiorules): Istio's own in-pod rule
# path, CreateInpodRules, timed for make bench beside meshlet's. It builds
# in Istio's module (istio.io/istio at ISTIO_VERSION, hack/thirdparty.sh),
# prepared as test/env/install-istio-cni.sh prepares it, in a copy of its
# go.mod and go.sum; once, keyed by version and by this recipe and source.
# Prints the binary's path on the last line.
set -euo pipefail
. "$(dirname "$0")/../../hack/thirdparty.sh"

src="$(dirname "$0")/testdata/istiorules/main.go"
key=$(cat "$0" "$src" | sha256sum | cut -c1-12)
BIN="$THIRDPARTY_CACHE/e2e-bin/istiorules-$ISTIO_VERSION-$key"
if [ ! -x "$BIN/istiorules" ]; then
  mod="$THIRDPARTY_CACHE/thirdparty-build/istio-$ISTIO_VERSION"
  # The packages install-istio-cni.sh prepares it with (the first to come
  # prepares it for both); CreateInpodRules is among their imports.
  thirdparty_own_module "$mod" "istio.io/istio@$ISTIO_VERSION" istio.io/istio/cni/cmd/install-cni istio.io/istio/cni/cmd/istio-cni
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp "$mod/go.mod" "$mod/go.sum" "$work/"
  mkdir -p "$work/istiorules" && cp "$src" "$work/istiorules/"
  mkdir -p "$BIN"
  (cd "$work" && CGO_ENABLED=0 go build -trimpath -o "$BIN/istiorules.tmp" ./istiorules)
  mv "$BIN/istiorules.tmp" "$BIN/istiorules"
fi
echo "$BIN/istiorules"
