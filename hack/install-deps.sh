#!/usr/bin/env bash
# Installs what building, linting and testing meshlet need on Debian/Ubuntu,
# as root. Idempotent: a second run changes nothing. Go tools (protoc-gen-go,
# staticcheck) are installed by the Makefile into ~/.cache/meshlet, keyed by
# version.
set -euo pipefail

need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v make >/dev/null || need+=(make)
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v iptables-restore >/dev/null || need+=(iptables)
command -v ipset >/dev/null || need+=(ipset)
command -v gcc >/dev/null || need+=(gcc libc6-dev) # go test -race needs cgo
command -v git >/dev/null || need+=(git)
# The image test runs the arm64 image's binaries under emulation.
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
# The end-to-end tests' runtime and pod network (test/env/install-runtime.sh checks
# too, for a run of its own; here they are installed before make test's
# installers run side by side, which apt's lock would not allow).
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
# CRI-O's: its monitor, the tool that loads the test image into its
# storage, and what its seccomp support builds against
# (test/env/install-crio.sh).
command -v conmon >/dev/null || need+=(conmon)
command -v skopeo >/dev/null || need+=(skopeo)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev)

if ((${#need[@]})); then
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  echo "install-deps: Go is not on PATH (expected /usr/local/go/bin); install Go 1.26 first" >&2
  exit 1
fi
echo "install-deps: $(go version), $(protoc --version)"
