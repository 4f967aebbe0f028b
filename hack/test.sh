#!/usr/bin/env bash
# make test: installs the third-party binaries the tests run and runs every
# package's tests, in phases so that a cold machine's largest jobs overlap
# instead of queueing.
#
#   0. containerd and crictl build, once every third-party module the
#      control plane needs is downloaded. Beside that, mostly while it
#      waits on the network, meshlet's packages and their tests compile
#      with the tests' flags (go list -export: compiled, not linked),
#      which phase 1's go test would otherwise do alone.
#   1. The end-to-end tests that need containerd alone run
#      (RUNTIME_TESTS) while, at a lower priority, the control plane, the
#      kubelet, helm, the upstream CNI plugins and istio-cni build beside
#      them, then
#      CRI-O and containerd 1.7, whose modules download meanwhile. Those
#      tests spend most of their time waiting on the runtime; the builds
#      take what they leave (on 2 cores, about 50 CPU-minutes from an
#      empty build cache).
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
RUNTIME_TESTS='^(TestFaultsDuringChurn|TestNodeReboot|TestRequiredPluginsMissTheFirstCreateAfterExit|TestNoMeshConnectionDropped)$'
# The end-to-end tests that need CRI-O and containerd 1.7: those run on
# every runtime (onEachRuntime), and the DaemonSet on CRI-O.
MATRIX_TESTS='^(TestMeshPodLifecycle|TestReplacedSandbox|TestSynchronizeWithReplacedSandboxes|TestPackets|TestZtunnelReconnectReplays|TestMeshletRestart|TestRuntimeRestart|TestFailClosedWithoutMeshlet|TestEnrollmentFailureRefusesPod|TestContainerGate|TestDaemonSetOnCRIO)$'

# stamp WHAT... notes on stderr how long into the run WHAT happened: the
# log of a slow run says which phase was slow.
stamp() {
  printf 'hack/test.sh: %dm%02ds: %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2
}

# Go's compiler collects garbage less often: GOGC=400 takes 10% less CPU
# (a cold go build of client-go on 2 cores: 277 -> 249 CPU-seconds, at
# about 1 GB of memory) and a cold run is CPU-bound throughout. The tests'
# binaries, and what they start, run with Go's default (go test -exec).
# A GOGC of the caller's own is left alone.
exec_flags=()
if [ -z "${GOGC:-}" ]; then
  export GOGC=400
  exec_flags=(-exec "env -u GOGC")
fi

failed=()
pkgs=$("$GO" list ./...) || exit 1
mapfile -t rest < <(grep -vx "$E2E" <<<"$pkgs")

state=$(mktemp -d)
warm='' prefetch='' builds='' e2e='' matrix=''
# Background jobs do not get the terminal's interrupt: stop them, and what
# they started (each runs in a process group of its own), with us.
trap 'for j in $warm $prefetch $builds $e2e $matrix; do kill -- -"$j" 2>/dev/null; done; rm -rf "$state"' EXIT
trap 'exit 130' INT TERM

# The go test flags that change how packages compile, for go list.
build_flags=()
for f in "$@"; do
  case $f in
  -race | -msan | -asan | -cover | -trimpath | -tags=* | -gcflags=* | -asmflags=*) build_flags+=("$f") ;;
  esac
done
set -m
# A compile error is the tests' to report, naming the package.
"$GO" list "${build_flags[@]}" -export -deps -test -f '' ./... >/dev/null 2>&1 &
warm=$!
set +m

runtime_env=$(./hack/install-test-bins.sh MESHLET_E2E_BIN) || exit 1
eval "$runtime_env"
stamp "containerd and crictl installed"
# Two go commands compiling the same packages at once both compile them.
wait "$warm"
warm=''
stamp "meshlet's packages compiled"

set -m
# Downloads only, at once: their builds come after the control plane's.
(
  (
    test/env/install-crio.sh --download &
    test/env/install-containerd17.sh --download &
    test/env/install-istio-cni.sh --download &
    wait
  ) 2>&1 | sed -u 's|^|[runtime downloads] |' >&2
) &
prefetch=$!
set +m

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
  install MESHLET_KUBE_BIN MESHLET_CLUSTER_BIN MESHLET_HELM MESHLET_CNI_PLUGINS MESHLET_ISTIO_CNI
  install MESHLET_CRIO_BIN
  install MESHLET_CONTAINERD17_BIN
) &
builds=$!
set +m

"$GO" test "${exec_flags[@]}" "$@" -run "$RUNTIME_TESTS" "$E2E" || failed+=("the end-to-end tests on containerd alone")
stamp "the end-to-end tests on containerd alone done"

set -m
if await MESHLET_KUBE_BIN; then
  stamp "the control plane installed"
  "$GO" test "${exec_flags[@]}" "$@" -skip "$RUNTIME_TESTS|$MATRIX_TESTS" "$E2E" &
  e2e=$!
else
  failed+=("building the control plane, the kubelet, helm or the CNI plugins (the output is above): the end-to-end tests on the cluster did not run")
fi
(
  for var in MESHLET_CRIO_BIN MESHLET_CONTAINERD17_BIN; do
    await "$var" || echo "building $var (the output is above): its runtime's tests fail, naming it" >>"$state/failed"
  done
  stamp "CRI-O and containerd 1.7 installed"
  "$GO" test "${exec_flags[@]}" "$@" -run "$MATRIX_TESTS" "$E2E" || echo "the end-to-end tests on every runtime" >>"$state/failed"
  stamp "the end-to-end tests on every runtime done"
) &
matrix=$!
set +m

"$GO" test "${exec_flags[@]}" "$@" "${rest[@]}" || failed+=("the other packages")
stamp "the other packages done"
if [ -n "$e2e" ]; then
  wait "$e2e" || failed+=("the end-to-end tests on the cluster")
  e2e=''
  stamp "the end-to-end tests on the cluster done"
fi
wait "$matrix"
matrix=''
wait "$builds"
builds=''
wait "$prefetch"
prefetch=''
if [ -s "$state/failed" ]; then
  mapfile -t -O "${#failed[@]}" failed <"$state/failed"
fi

if ((${#failed[@]})); then
  printf 'hack/test.sh: FAIL: %s\n' "${failed[@]}" >&2
  exit 1
fi
