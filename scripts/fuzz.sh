#!/usr/bin/env bash
# Runs every native fuzz target of the workspace for the given time each.
set -euo pipefail
fuzztime=${1:-60s}
cd "$(dirname "$0")/.."
found=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    found=1
    echo "fuzz ${dir}:${target} for ${fuzztime}"
    (cd "$dir" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" .)
  done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
[ "$found" = 1 ] || echo "fuzz: no targets yet"
