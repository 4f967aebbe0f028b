#!/usr/bin/env bash
# Installs CRI-O (crio and pinns), a runtime the end-to-end matrix runs
# meshlet on, and what it runs pods with: Debian's conmon, and skopeo to
# load the test image into its storage (no registry here). crio builds
# from the Go module proxy in a module of its own under the cache
# (hack/thirdparty.sh), with cgo (seccomp); pinns, which CRI-O pins pods'
# namespaces with, is C, built from the same module's source. Both once,
# keyed by version. Prints the bin directory on the last line; with
# --download, only downloads what the build needs, and prints nothing.
set -euo pipefail
. "$(dirname "$0")/../../hack/thirdparty.sh"

# Keyed by the version and by this recipe (build tags, cgo, pinns): a
# change to either builds anew.
BIN="$THIRDPARTY_CACHE/e2e-bin/crio-$CRIO_VERSION-$(sha256sum "$0" | cut -c1-12)"

need=()
command -v conmon >/dev/null || need+=(conmon)
command -v skopeo >/dev/null || need+=(skopeo)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
if ((${#need[@]})); then
  echo "crio install: apt-get install ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

built() { [ -x "$BIN/crio" ] && [ -x "$BIN/pinns" ]; }
mod="$THIRDPARTY_CACHE/thirdparty-build/crio-$CRIO_VERSION"
if ! built; then
  thirdparty_own_module "$mod" "github.com/cri-o/cri-o@$CRIO_VERSION" github.com/cri-o/cri-o/cmd/crio
  if [ "${1:-}" = --download ]; then
    exit 0
  fi
  thirdparty_lock
fi
if ! built; then
  echo "crio install: building crio and pinns $CRIO_VERSION" >&2
  rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
  # CRI-O's own build tags, less the storage drivers and signature
  # backends that need C libraries Debian would have to provide.
  tags="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper btrfs_noversion seccomp"
  (cd "$mod" && CGO_ENABLED=1 go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -tags "$tags" \
    -o "$BIN.tmp/crio" github.com/cri-o/cri-o/cmd/crio)
  src=$(cd "$mod" && go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)
  cp -r "$src/pinns" "$BIN.tmp/pinns-src" && chmod -R u+w "$BIN.tmp/pinns-src"
  make -s -C "$BIN.tmp/pinns-src" >&2
  mv "$BIN.tmp/bin/pinns" "$BIN.tmp/pinns"
  rm -rf "$BIN.tmp/pinns-src" "$BIN.tmp/bin"
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
fi
[ "${1:-}" = --download ] || echo "$BIN"
