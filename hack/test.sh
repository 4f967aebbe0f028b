#!/usr/bin/env bash
# Runs every package's tests (make test): the end-to-end package in one go
# test, every other package in a second one beside it, at a lower priority.
#
# Why two: the end-to-end package is the longest by far and spends most of
# its time waiting on its runtime and cluster, so the rest fits in beside
# it; but its own bursts (meshlet's hooks, the API server starting, pods
# made while a fault is injected) are the critical path, and the other
# packages' compiles should not slow them. Both go tests would compile the
# same packages at the same moment (two go commands do not share work in
# flight), so the packages are compiled once first, with the tests' flags.
#
# Usage: hack/test.sh [go test flags...]. Exits non-zero if either fails.
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
E2E=github.com/meshlet/meshlet/test/e2e

race=()
for f in "$@"; do [ "$f" = -race ] && race=(-race); done
# Every package compiled once, as the tests (and the end-to-end tests'
# meshlet daemon) will use it: go list -export compiles without linking
# the commands, which nothing here would run.
"$GO" list "${race[@]}" -export -f '{{.ImportPath}}' ./... >/dev/null || exit 1

mapfile -t rest < <("$GO" list ./... | grep -vx "$E2E")
"$GO" test "$@" "$E2E" &
e2e=$!
nice -n 10 "$GO" test "$@" "${rest[@]}"
rest_rc=$?
wait "$e2e"
e2e_rc=$?
if [ "$e2e_rc" != 0 ] || [ "$rest_rc" != 0 ]; then
  echo "hack/test.sh: FAIL (end-to-end package: exit $e2e_rc; the others: exit $rest_rc)" >&2
  exit 1
fi
