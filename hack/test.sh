#!/usr/bin/env bash
# make test: installs the third-party binaries the tests run and runs every
# package's tests, in phases so that a cold machine's largest jobs overlap
# instead of queueing.
#
#   1. containerd and crictl are built; then, while CRI-O and containerd
#      1.7, and after those the control plane, the kubelet, helm and the
#      upstream CNI plugins, build beside them at a lower priority, the
#      end-to-end tests that need containerd alone run (RUNTIME_TESTS).
#      Those tests spend most of their time waiting on the runtime; the
#      builds take what they leave (on 2 cores, about 50 CPU-minutes from
#      an empty build cache).
#   2. Once CRI-O and containerd 1.7 are built: the end-to-end tests every
#      runtime runs (MATRIX_TESTS, each as one subtest per runtime).
#   3. Once the rest is built: the other end-to-end tests, and every other
#      package beside them (at the same priority: the unit tests' bounded
#      waits, starved beside the cluster, timed out at nice 10).
#
# Every test runs once: phase 3 runs the end-to-end tests phases 1 and 2
# did not. A test not in either list runs in phase 3, which is always
# right; one in a list that needs more than it has fails (CI) or is
# skipped, naming what it lacks. If a build fails, the tests that need it
# fail naming it (or, for the cluster, do not run), the rest still run,
# and every failure is named at the end.
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
builds='' e2e=''
# Background jobs do not get the terminal's interrupt: stop them, and what
# they started (each runs in a process group of its own), with us.
trap 'for j in $builds $e2e; do kill -- -"$j" 2>/dev/null; done; rm -rf "$state"' EXIT
trap 'exit 130' INT TERM
set -m
# The other runtimes first (phase 2 waits for them), then the rest: they
# take turns on one lock (hack/thirdparty.sh), so the order is theirs. At a
# lower priority than phase 1's tests, whose waits are bounded.
(
  for var in MESHLET_CRIO_BIN MESHLET_CONTAINERD17_BIN; do
    nice -n 10 ./hack/install-test-bins.sh "$var" >"$state/$var.env"
    echo $? >"$state/$var.status"
  done
  nice -n 10 ./hack/install-test-bins.sh MESHLET_KUBE_BIN MESHLET_CLUSTER_BIN MESHLET_HELM MESHLET_CNI_PLUGINS >"$state/cluster.env"
) &
builds=$!
set +m

"$GO" test "$@" -run "$RUNTIME_TESTS" "$E2E" || failed+=("the end-to-end tests on containerd alone")

# Phase 2 waits for the runtimes' builds, not the rest's (one background
# job builds all, in turn). A runtime that did not build fails its tests,
# naming its variable; the others run.
until [ -s "$state/MESHLET_CONTAINERD17_BIN.status" ] || ! kill -0 "$builds" 2>/dev/null; do sleep 2; done
for var in MESHLET_CRIO_BIN MESHLET_CONTAINERD17_BIN; do
  if [ "$(cat "$state/$var.status" 2>/dev/null)" = 0 ]; then
    eval "$(cat "$state/$var.env")"
  else
    failed+=("building $var (the output is above): its runtime's tests fail, naming it")
  fi
done
"$GO" test "$@" -run "$MATRIX_TESTS" "$E2E" || failed+=("the end-to-end tests on every runtime")

if wait "$builds"; then
  builds=''
  eval "$(cat "$state/cluster.env")"
  set -m
  "$GO" test "$@" -skip "$RUNTIME_TESTS|$MATRIX_TESTS" "$E2E" &
  e2e=$!
  set +m
else
  builds=''
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
