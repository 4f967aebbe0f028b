#!/usr/bin/env bash
# Builds helm from its Go module (the Go module proxy is where Go tools come
# from here) into a directory cached outside the clone, keyed by version:
# later runs, and fresh clones on the same machine, reuse it. Cold: about 4
# minutes on 2 cores (helm pulls in much of Kubernetes' client libraries).
# Prints the directory holding the helm binary on the last line.
set -euo pipefail

HELM_VERSION=v3.22.0
CACHE="${MESHLET_CACHE:-$HOME/.cache/meshlet}"
DIR="$CACHE/tools/helm-$HELM_VERSION"

if [ ! -x "$DIR/helm" ]; then
  echo "helm install: building helm $HELM_VERSION (cold: a few minutes)" >&2
  # The link-time settings of helm's own Makefile: the version it reports,
  # and the Kubernetes version `helm template` and `helm lint` assume
  # without a cluster (1 + client-go's major, client-go's minor; a plain
  # go install would assume v1.20.0).
  gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  clientgo=$(sed -n 's#^\s*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -n 1)
  if [ -z "$clientgo" ]; then
    echo "helm install: no k8s.io/client-go version in $gomod" >&2
    exit 1
  fi
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$clientgo"
  done
  rm -rf "$DIR.tmp" && mkdir -p "$DIR.tmp"
  CGO_ENABLED=0 GOBIN="$DIR.tmp" go install -trimpath -gcflags=all=-dwarf=false -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
fi
echo "$DIR"
