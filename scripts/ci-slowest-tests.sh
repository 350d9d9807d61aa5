#!/usr/bin/env bash
# The slowest tests of the last ctest run in each build directory given, from
# ctest's own record of test times (Testing/Temporary/CTestCostData.txt: after
# a single run, that run's seconds), slowest first, each with its build.
#
#   scripts/ci-slowest-tests.sh [-n N] BUILD_DIR...     (default N: 10)
set -euo pipefail
n=10
if [[ "${1:-}" == -n ]]; then n="$2"; shift 2; fi
for dir in "$@"; do
  costs="$dir/Testing/Temporary/CTestCostData.txt"
  [[ -f "$costs" ]] || continue
  # Lines "name runs seconds" until the "---" line that starts the failed list.
  awk -v b="$dir" '/^---/ {exit} NF == 3 {printf "%10.1f s  %-12s %s\n", $3, b, $1}' "$costs"
done | sort -rn | head -n "$n"
