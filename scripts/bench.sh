#!/usr/bin/env bash
# Runs the benchmarks of the workspace and prints them as a table. Each benchmark family measures its own
# baseline in the same run, so ratios stay meaningful on a slow or busy machine.
set -euo pipefail
benchtime=${1:-1x}
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench . -benchtime "$benchtime" -benchmem work | tee "$out" >/dev/null || { cat "$out"; exit 1; }
printf '%-60s %14s %14s %s\n' benchmark ns/op B/op extra
grep -E '^Benchmark' "$out" | awk '{name=$1; ns=""; b=""; extra="";
  for (i=3;i<=NF;i+=2) { if ($(i+1)=="ns/op") ns=$i; else if ($(i+1)=="B/op") b=$i; else if ($(i+1)!="allocs/op") extra=extra" "$i" "$(i+1) }
  printf "%-60s %14s %14s%s\n", name, ns, b, extra}'
