#!/usr/bin/env bash
# make test: installs the third-party binaries the tests run and runs every
# package's tests, in two phases so that a cold machine's largest jobs
# overlap instead of queueing.
#
#   1. The runtime (containerd, crictl) is built, then the end-to-end tests
#      that need nothing more (RUNTIME_TESTS) run, while the control plane,
#      the kubelet, helm and the upstream CNI plugins build beside them at a
#      lower priority. Those tests spend most of their time waiting on the
#      runtime; the builds take what they leave (on 2 cores, about 37
#      CPU-minutes from an empty build cache).
#   2. Once those are built: the rest of the end-to-end tests, and every
#      other package beside them (at the same priority: the unit tests'
#      bounded waits, starved beside the cluster, timed out at nice 10).
#
# Every test runs once: phase 2 runs the end-to-end tests phase 1 did not.
# If those builds fail, phase 2 runs the other packages without them (the
# tests that need them fail, naming what they lack) and not the cluster's
# end-to-end tests.
# A test not in RUNTIME_TESTS runs in phase 2, which is always right; one
# in it that needs the control plane fails (CI) or is skipped, naming what
# it lacks.
#
# Usage: hack/test.sh [go test flags...] (not -run or -skip). Exits
# non-zero if any phase fails; each failure is named at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
E2E=github.com/meshlet/meshlet/test/e2e
# The end-to-end tests that need only the runtime (and Debian's CNI plugins).
RUNTIME_TESTS='^(TestMeshPodLifecycle|TestPackets|TestZtunnelReconnectReplays|TestMeshletRestart|TestContainerdRestart|TestFailClosedWithoutMeshlet|TestFaultsDuringChurn|TestNodeReboot|TestRequiredPluginsMissTheFirstCreateAfterExit)$'

failed=()
pkgs=$("$GO" list ./...) || exit 1
mapfile -t rest < <(grep -vx "$E2E" <<<"$pkgs")

runtime_env=$(./hack/install-test-bins.sh MESHLET_E2E_BIN) || exit 1
eval "$runtime_env"

cluster_env=$(mktemp)
installs='' e2e=''
# Background jobs do not get the terminal's interrupt: stop them with us.
trap 'kill $installs $e2e 2>/dev/null; rm -f "$cluster_env"' EXIT
trap 'exit 130' INT TERM
nice -n 10 ./hack/install-test-bins.sh MESHLET_KUBE_BIN MESHLET_CLUSTER_BIN MESHLET_HELM MESHLET_CNI_PLUGINS >"$cluster_env" &
installs=$!

"$GO" test "$@" -run "$RUNTIME_TESTS" "$E2E" || failed+=("the end-to-end tests on the runtime alone")

if wait "$installs"; then
  installs=''
  eval "$(cat "$cluster_env")"
  "$GO" test "$@" -skip "$RUNTIME_TESTS" "$E2E" &
  e2e=$!
else
  installs=''
  failed+=("building the control plane, the kubelet, helm or the CNI plugins (the output is above): the end-to-end tests on the cluster did not run")
fi
"$GO" test "$@" "${rest[@]}" || failed+=("the other packages")
if [ -n "$e2e" ]; then
  wait "$e2e" || failed+=("the end-to-end tests on the cluster")
  e2e=''
fi

if ((${#failed[@]})); then
  printf 'hack/test.sh: FAIL: %s\n' "${failed[@]}" >&2
  exit 1
fi
