#!/usr/bin/env bash
# What the 45-minute CI run (.ci/run) does not do, for a machine with a night
# to spare (docs/testing.md, "What CI runs"):
#   - the whole suite under TSan, not only the concurrency tests: a TSan build
#     of everything with tests, every ctest test but those that run oneDNN
#     (libgomp is not instrumented) and the nested-ASan conformance build;
#   - every fuzz target for --fuzz-time seconds (default 600; CI gives 30).
# The ASan+UBSan phase is not repeated: CI already runs every test under it.
#
#   scripts/ci-nightly.sh [--build-root DIR] [--fuzz-time S]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
root="$here" fuzz_time=600
while (($#)); do
  case "$1" in
    --build-root) root="$2"; shift 2 ;;
    --fuzz-time) fuzz_time="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ci-nightly.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
scripts/install-deps.sh --test && scripts/install-deps.sh --fuzz || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
failed=0

b="$root/build-tsan-all"
echo "==== nightly: tsan, the whole suite"
if cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
     -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DHALO_BUILD_BENCHMARKS=OFF -DHALO_BUILD_TESTS=ON \
     -DHALO_SANITIZE=thread >/dev/null && cmake --build "$b" -j "$jobs"; then
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$here/scripts/tsan.supp" \
    ctest --test-dir "$b" -j "$jobs" --output-on-failure --timeout 3600 \
      -E '^(OneDnn\.|Numerics\.OneDnnMatmulBackend$|integration_bench_latency$|conformance_cpu_asan$)' || failed=1
else
  echo "nightly: the TSan build failed"; failed=1
fi

echo "==== nightly: fuzz, ${fuzz_time}s per target"
scripts/ci-sanitizers.sh --build-root "$root" --fuzz-time "$fuzz_time" fuzz || failed=1
exit $failed
