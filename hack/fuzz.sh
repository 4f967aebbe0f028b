#!/usr/bin/env bash
# Runs every Go fuzz target of the module (func FuzzXxx in a _test.go
# file) for FUZZTIME each (default 30s), one after the other, on top of
# its committed seed corpus (testdata/fuzz/<target>/ and its f.Add seeds).
# A crash fails the run; go test writes the failing input under
# testdata/fuzz/<target>/ for a regression seed. Prints each target's
# executions.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-30s}"
# Minimizing each new interesting input is bounded by executions, not
# time: a target whose coverage varies run to run (one doing real socket
# I/O) would otherwise spend up to a minute on every such input, inside
# the fuzzing time.
minimize="${FUZZMINIMIZE:-200x}"
mapfile -t targets < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func ||; s|^|$(dirname "$f") |"
done)
if ((${#targets[@]} == 0)); then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
summary=()
for t in "${targets[@]}"; do
  pkg="${t% *}" name="${t#* }"
  echo "fuzz: $name in $pkg for $fuzztime"
  # go test can report its own deadline at the end of -fuzztime as a
  # failure ("context deadline exceeded", no input written): that target
  # runs once more. A failure that wrote an input never does.
  for attempt in 1 2; do
    if out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" "$pkg" 2>&1); then
      break
    fi
    if ((attempt == 1)) && grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written to' <<<"$out"; then
      echo "fuzz: $name: go test reported its own deadline, no failing input; running it again"
      continue
    fi
    echo "$out"
    echo "fuzz: $name in $pkg FAILED" >&2
    exit 1
  done
  # A slow target can spend all of a short FUZZTIME replaying its corpus
  # (go test's cache keeps every input that found new coverage): then no
  # progress line names its executions, and it shows as "?".
  execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -n 1 | cut -d' ' -f2 || true)
  summary+=("$(printf '%-22s %-34s %12s execs' "$name" "$pkg" "${execs:-?}")")
done
echo "fuzz: ${#targets[@]} targets, $fuzztime each, no crash:"
printf '  %s\n' "${summary[@]}"
