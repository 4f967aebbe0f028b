#!/usr/bin/env bash
# Installs every third-party binary the tests run (containerd and crictl,
# containerd 1.7, CRI-O, etcd and the Kubernetes control plane, the
# kubelet, the CNI plugins, helm, istio-cni) and prints the environment the tests find them by:
#
#   env="$(hack/install-test-bins.sh)" && eval "$env"
#
# Given variable names (MESHLET_E2E_BIN ...), it installs and prints only
# those.
#
# Each installer caches its binaries by version (see its own header). The
# Go commands build in one module (hack/thirdparty.sh; containerd 1.7 and
# CRI-O in modules of their own) and take turns on its lock, so that one
# reuses what another compiled; only the CNI plugins' build runs beside
# them. Progress goes to
# stderr, each line tagged with its installer. Fails, naming the installer,
# if any of them fails.
set -euo pipefail
cd "$(dirname "$0")/.."

all=(
  MESHLET_E2E_BIN=test/env/install-runtime.sh
  MESHLET_CONTAINERD17_BIN=test/env/install-containerd17.sh
  MESHLET_CRIO_BIN=test/env/install-crio.sh
  MESHLET_KUBE_BIN=test/env/install-kube.sh
  MESHLET_CLUSTER_BIN=test/env/install-cluster.sh
  MESHLET_CNI_PLUGINS=cnifallback/chaintest/install.sh
  MESHLET_HELM=hack/install-helm.sh
  MESHLET_ISTIO_CNI=test/env/install-istio-cni.sh
)
installers=("${all[@]}")
if (($#)); then
  installers=()
  for var in "$@"; do
    found=
    for i in "${all[@]}"; do
      if [ "${i%%=*}" = "$var" ]; then installers+=("$i") found=1; fi
    done
    if [ -z "$found" ]; then
      echo "install-test-bins: no installer for $var (known: ${all[*]%%=*})" >&2
      exit 2
    fi
  done
fi

# The apt packages the installers check for, once, before they run side by
# side: apt's lock admits one install at a time.
if ! command -v runc >/dev/null || [ ! -x /usr/lib/cni/bridge ] || ! command -v conmon >/dev/null ||
  ! command -v skopeo >/dev/null || ! command -v pkg-config >/dev/null || [ ! -f /usr/include/seccomp.h ]; then
  ./hack/install-deps.sh >&2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pids=()
for i in "${installers[@]}"; do
  var=${i%%=*} script=${i#*=}
  # stdout (the directory) to a file, stderr tagged; the subshell exits
  # with the installer's status once its last line is out.
  ( "$script" 2>&1 >"$out/$var" | sed -u "s|^|[$script] |" >&2
    exit "${PIPESTATUS[0]}" ) &
  pids+=("$!")
done

failed=()
for n in "${!installers[@]}"; do
  wait "${pids[$n]}" || failed+=("${installers[$n]#*=}")
done
if ((${#failed[@]})); then
  echo "install-test-bins: failed: ${failed[*]} (their output is above)" >&2
  exit 1
fi
for i in "${installers[@]}"; do
  var=${i%%=*}
  dir=$(tail -n 1 "$out/$var")
  if [ ! -d "$dir" ]; then
    echo "install-test-bins: ${i#*=} printed no directory on its last line (got \"$dir\")" >&2
    exit 1
  fi
  printf 'export %s=%q\n' "$var" "$dir"
done
