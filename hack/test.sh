#!/usr/bin/env bash
# make test: installs the third-party binaries the tests run and runs every
# package's tests, in two phases so that a cold machine's largest jobs
# overlap instead of queueing.
#
#   1. The runtime (containerd, crictl) and the CNI plugins are built, then
#      the end-to-end tests that need nothing more (RUNTIME_TESTS) run,
#      while the control plane, the kubelet and helm build beside them at a
#      lower priority. Those tests spend most of their time waiting on the
#      runtime; the builds take what they leave (on 2 cores, about 37
#      CPU-minutes from an empty build cache).
#   2. Once those are built: the rest of the end-to-end tests, and every
#      other package beside them at a lower priority, so their compiles do
#      not slow the cluster's start-ups and the pods they time.
#
# Every test runs once: phase 2 runs the end-to-end tests phase 1 did not.
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
# The end-to-end tests that need only the runtime and the CNI plugins.
RUNTIME_TESTS='^(TestMeshPodLifecycle|TestPackets|TestZtunnelReconnectReplays|TestMeshletRestart|TestContainerdRestart|TestFailClosedWithoutMeshlet|TestFaultsDuringChurn|TestNodeReboot|TestRequiredPluginsMissTheFirstCreateAfterExit)$'

failed=()

runtime_env=$(./hack/install-test-bins.sh MESHLET_E2E_BIN MESHLET_CNI_PLUGINS) || exit 1
eval "$runtime_env"

cluster_env=$(mktemp)
trap 'rm -f "$cluster_env"' EXIT
nice -n 10 ./hack/install-test-bins.sh MESHLET_KUBE_BIN MESHLET_CLUSTER_BIN MESHLET_HELM >"$cluster_env" &
installs=$!

"$GO" test "$@" -run "$RUNTIME_TESTS" "$E2E" || failed+=("the end-to-end tests on the runtime alone")

if ! wait "$installs"; then
  echo "hack/test.sh: FAIL: building the control plane, the kubelet or helm (the output is above); the tests that need them did not run" >&2
  exit 1
fi
eval "$(cat "$cluster_env")"

mapfile -t rest < <("$GO" list ./... | grep -vx "$E2E")
"$GO" test "$@" -skip "$RUNTIME_TESTS" "$E2E" &
e2e=$!
nice -n 10 "$GO" test "$@" "${rest[@]}" || failed+=("the other packages")
wait "$e2e" || failed+=("the end-to-end tests on the cluster")

if ((${#failed[@]})); then
  printf 'hack/test.sh: FAIL: %s\n' "${failed[@]}" >&2
  exit 1
fi
