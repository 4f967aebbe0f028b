#!/usr/bin/env bash
# Builds helm from its Go module (the Go module proxy is where Go tools come
# from here), in the third-party module hack/thirdparty.sh keeps under the
# cache, into a directory there keyed by version: later runs, and fresh
# clones on the same machine, reuse it. On a cold machine that module
# resolves and downloads the other third-party commands too (the header of
# hack/thirdparty.sh says why). Prints the directory holding the helm binary
# on the last line.
set -euo pipefail
. "$(dirname "$0")/thirdparty.sh"

DIR="$THIRDPARTY_CACHE/helm-bin/$THIRDPARTY_KEY"

if [ ! -x "$DIR/helm" ]; then
  thirdparty_lock
fi
if [ ! -x "$DIR/helm" ]; then
  echo "helm install: building helm $HELM_VERSION" >&2
  # The link-time settings of helm's own Makefile: the version it reports,
  # and the Kubernetes version `helm template` and `helm lint` assume
  # without a cluster (1 + client-go's major, client-go's minor, from
  # helm's own go.mod; a plain go install would assume v1.20.0).
  gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  clientgo=$(sed -n 's#^\s*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -n 1)
  if [ -z "$clientgo" ]; then
    echo "helm install: no k8s.io/client-go version in $gomod" >&2
    exit 1
  fi
  ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$clientgo"
  done
  rm -rf "$DIR.tmp" && mkdir -p "$DIR.tmp"
  thirdparty_build "$DIR.tmp" "$ldflags" helm=helm.sh/helm/v3/cmd/helm
  rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
fi
echo "$DIR"
