#!/usr/bin/env bash
# Runs every native fuzz target of the workspace for the given time each.
#
# A target fails when the fuzzer finds an input that fails it (and writes it under testdata/fuzz/). Go's fuzz
# coordinator can also end a time-limited run with a bare "context deadline exceeded" and no input written, a
# race in the toolchain at the end of -fuzztime (golang/go#75804, fixed in Go 1.27); such a run is retried
# once and then reported as a warning, never as a finding.
set -euo pipefail
fuzztime=${1:-60s}
cd "$(dirname "$0")/.."
found=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run_target DIR TARGET: 0 passed, 1 found a failing input (or failed otherwise), 2 hit the coordinator race.
run_target() {
  local dir=$1 target=$2 corpus before after
  corpus="$dir/testdata/fuzz/$target"
  before=$(ls "$corpus" 2>/dev/null | wc -l)
  if (cd "$dir" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" .) >"$log" 2>&1; then
    cat "$log"
    return 0
  fi
  cat "$log"
  after=$(ls "$corpus" 2>/dev/null | wc -l)
  if [ "$after" = "$before" ] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"; then
    return 2
  fi
  return 1
}

while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    found=1
    echo "fuzz ${dir}:${target} for ${fuzztime}"
    rc=0
    run_target "$dir" "$target" || rc=$?
    if [ "$rc" = 2 ]; then
      echo "fuzz ${dir}:${target}: ended by the coordinator's deadline race with no failing input; running it again"
      rc=0
      run_target "$dir" "$target" || rc=$?
      if [ "$rc" = 2 ]; then
        echo "warning: fuzz ${dir}:${target}: the coordinator's deadline race again; no failing input was found"
        rc=0
      fi
    fi
    if [ "$rc" != 0 ]; then
      echo "FAIL: fuzz ${dir}:${target}"
      failed=1
    fi
  done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
[ "$found" = 1 ] || echo "fuzz: no targets yet"
exit "$failed"
