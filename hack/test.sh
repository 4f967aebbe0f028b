#!/usr/bin/env bash
# make test: installs the third-party binaries the tests run and runs every
# package's tests, in phases so that a cold machine's largest jobs overlap
# instead of queueing.
#
#   1. containerd and crictl are built; then the end-to-end tests that need
#      containerd alone run (RUNTIME_TESTS) while, at a lower priority, the
#      control plane, the kubelet, helm and the upstream CNI plugins build
#      beside them, then CRI-O and containerd 1.7. Those tests spend most
#      of their time waiting on the runtime; the builds take what they
#      leave (on 2 cores, about 50 CPU-minutes from an empty build cache).
#   2. Once the control plane is built: the other end-to-end tests, and
#      every other package beside them (at the same priority: the unit
#      tests' bounded waits, starved beside the cluster, timed out at
#      nice 10). Once CRI-O and containerd 1.7 are built, beside those:
#      the end-to-end tests every runtime runs (MATRIX_TESTS, each a
#      subtest per runtime), which fill the time the cluster's tests
#      spend waiting.
#
# Every test runs once: the cluster's run skips the tests of the other
# two lists. A test in no list runs there, which is always right; one in
# a list that needs more than it has fails (CI) or is skipped, naming what
# it lacks. If a build fails, the tests that need it fail naming it (or,
# for the cluster, do not run), the rest still run, and every failure is
# named at the end.
#
# Usage: hack/test.sh [go test flags...] (not -run or -skip). Exits
# non-zero if any phase fails; each failure is named at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
E2E=github.com/meshlet/meshlet/test/e2e
# The end-to-end tests that need only containerd (and Debian's CNI plugins).
RUNTIME_TESTS='^(TestFaultsDuringChurn|TestNodeReboot|TestRequiredPluginsMissTheFirstCreateAfterExit)$'
# The end-to-end tests run on every runtime (onEachRuntime).
MATRIX_TESTS='^(TestMeshPodLifecycle|TestPackets|TestZtunnelReconnectReplays|TestMeshletRestart|TestRuntimeRestart|TestFailClosedWithoutMeshlet|TestEnrollmentFailureRefusesPod|TestContainerGate)$'

failed=()
pkgs=$("$GO" list ./...) || exit 1
mapfile -t rest < <(grep -vx "$E2E" <<<"$pkgs")

runtime_env=$(./hack/install-test-bins.sh MESHLET_E2E_BIN) || exit 1
eval "$runtime_env"

state=$(mktemp -d)
builds='' e2e='' matrix=''
# Background jobs do not get the terminal's interrupt: stop them, and what
# they started (each runs in a process group of its own), with us.
trap 'for j in $builds $e2e $matrix; do kill -- -"$j" 2>/dev/null; done; rm -rf "$state"' EXIT
trap 'exit 130' INT TERM

# install VAR... installs the binaries the variables name, at a lower
# priority, into $state/<first VAR>.env and .status.
install() {
  nice -n 10 ./hack/install-test-bins.sh "$@" >"$state/$1.env"
  echo $? >"$state/$1.status"
}
# await VAR waits for install's status for VAR, or for the build job's end.
await() {
  until [ -s "$state/$1.status" ] || ! kill -0 "$builds" 2>/dev/null; do sleep 2; done
  [ "$(cat "$state/$1.status" 2>/dev/null)" = 0 ] && eval "$(cat "$state/$1.env")"
}

set -m
# One after another: they take turns on one lock (hack/thirdparty.sh)
# anyway, and this is the order the tests need them in.
(
  install MESHLET_KUBE_BIN MESHLET_CLUSTER_BIN MESHLET_HELM MESHLET_CNI_PLUGINS
  install MESHLET_CRIO_BIN
  install MESHLET_CONTAINERD17_BIN
) &
builds=$!
set +m

"$GO" test "$@" -run "$RUNTIME_TESTS" "$E2E" || failed+=("the end-to-end tests on containerd alone")

set -m
if await MESHLET_KUBE_BIN; then
  "$GO" test "$@" -skip "$RUNTIME_TESTS|$MATRIX_TESTS" "$E2E" &
  e2e=$!
else
  failed+=("building the control plane, the kubelet, helm or the CNI plugins (the output is above): the end-to-end tests on the cluster did not run")
fi
(
  for var in MESHLET_CRIO_BIN MESHLET_CONTAINERD17_BIN; do
    await "$var" || echo "building $var (the output is above): its runtime's tests fail, naming it" >>"$state/failed"
  done
  "$GO" test "$@" -run "$MATRIX_TESTS" "$E2E" || echo "the end-to-end tests on every runtime" >>"$state/failed"
) &
matrix=$!
set +m

"$GO" test "$@" "${rest[@]}" || failed+=("the other packages")
if [ -n "$e2e" ]; then
  wait "$e2e" || failed+=("the end-to-end tests on the cluster")
  e2e=''
fi
wait "$matrix"
matrix=''
wait "$builds"
builds=''
if [ -s "$state/failed" ]; then
  mapfile -t -O "${#failed[@]}" failed <"$state/failed"
fi

if ((${#failed[@]})); then
  printf 'hack/test.sh: FAIL: %s\n' "${failed[@]}" >&2
  exit 1
fi
