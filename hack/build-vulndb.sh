#!/usr/bin/env bash
# Builds the Go vulnerability database govulncheck reads (-db file://DIR)
# from the OSV files of the golang.org/x/vulndb module at VERSION, which
# the Go module proxy serves (vuln.go.dev need not be reachable), with
# that module's own indexdb. Writes DIR atomically.
# Usage: hack/build-vulndb.sh VERSION DIR
set -euo pipefail
version="$1" out="$2"
go="${GO:-go}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$(cd "$work" && "$go" mod download -json "golang.org/x/vulndb@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
if [[ -z "$src" || ! -d "$src/data/osv" ]]; then
  echo "build-vulndb: golang.org/x/vulndb@$version has no data/osv (download failed?)" >&2
  exit 1
fi
GOBIN="$work/bin" "$go" install "golang.org/x/vulndb/cmd/indexdb@$version"
"$work/bin/indexdb" -vulns "$src/data/osv" -out "$work/db"
mkdir -p "$(dirname "$out")"
rm -rf "$out.tmp"
mv "$work/db" "$out.tmp"
rm -rf "$out" # a partial one from an interrupted build
mv -T "$out.tmp" "$out"
echo "build-vulndb: $(ls "$src/data/osv" | wc -l) entries of golang.org/x/vulndb@$version in $out"
