#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan+UBSan, its own build
# directory) and runs each for a time or a number of executions, starting from
# its seed corpus fuzz/corpus/<target>/ (never modified: new inputs go to a
# working corpus in the build directory). Prints, per target, the executions,
# the coverage reached and whether it crashed; exits non-zero when any target
# crashed, naming the reproducer file. See docs/testing.md.
#
#   scripts/fuzz.sh [--time S | --runs N] [--jobs N] [--build-dir DIR] [--no-build] [--regressions] [TARGET...]
#
#   --time S       run each target S seconds (default 60)
#   --runs N       run each target N executions instead
#   --build-dir D  build directory (default: build-fuzz in the repository)
#   --jobs N       run N targets at once (default 1)
#   --no-build     use the fuzzers already built in the build directory
#   --regressions  only replay the reproducers of fuzz/regressions/<target>/
#                  (each must run without a crash) and exit
#   --list         print the targets and exit
#   TARGET         a target name (e.g. jinja_fuzzer or jinja); default: all
#
# Environment: CC/CXX (default clang-16/clang++-16 when installed, else clang/clang++), FUZZ_FLAGS (more libFuzzer
# flags), HALO_FUZZ_STRICT=1 (stop on exceptions that are not halo::Error), HALO_UBSAN_SKIP (UBSan checks
# not to instrument, e.g. "vptr;null"; CI's quick run sets it).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

time_s=60 runs="" jobs=1 build_dir="$here/build-fuzz" do_build=1 regressions=0 list=0
targets=()
while (($#)); do
  case "$1" in
    --time) time_s="$2"; runs=""; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --regressions) regressions=1; shift ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) t="$1"; [[ "$t" == *_fuzzer ]] || t="${t}_fuzzer"; targets+=("$t"); shift ;;
  esac
done

all=()
while read -r t; do all+=("$t"); done < <(sed -n 's/^halo_add_fuzzer(\([a-z0-9_]*\).*/\1/p' fuzz/CMakeLists.txt)
if ((list)); then printf '%s\n' "${all[@]}"; exit 0; fi
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target $t (one of: ${all[*]})" >&2; exit 2; }
done

# clang >= 16: the sources capture structured bindings in lambdas (C++20),
# which clang 14 (Debian 12's default clang) rejects. Debian 12: clang-16 libclang-rt-16-dev.
if [[ -z "${CXX:-}" ]]; then
  if command -v clang++-16 >/dev/null; then CC=clang-16 CXX=clang++-16; else CC=clang CXX=clang++; fi
fi
export CC="${CC:-clang}" CXX
if ((do_build)); then
  if ! command -v "$CXX" >/dev/null; then
    echo "fuzz.sh: $CXX not found: apt-get install clang-16 libclang-rt-16-dev (scripts/install-deps.sh --fuzz)" >&2
    exit 3
  fi
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DHALO_BUILD_FUZZERS=ON -DHALO_BUILD_TESTS=OFF -DHALO_BUILD_BENCHMARKS=OFF \
    -DHALO_UBSAN_SKIP="${HALO_UBSAN_SKIP:-}" >/dev/null
  cmake --build "$build_dir" --target "${targets[@]}"
fi

# Leaks are reported (libFuzzer's -detect_leaks); a UBSan report stops the run.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_stack_use_after_return=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

# One target's regression replay or timed run; its summary line goes to
# $build_dir/fuzz-<target>.summary, its exit status says whether it failed.
replay_one() {
  local t="$1" bin="$build_dir/fuzz/$1" files
  shopt -s nullglob
  files=(fuzz/regressions/"$t"/*)
  shopt -u nullglob
  if ((${#files[@]} == 0)); then
    echo "$t: no reproducers"
  elif "$bin" -runs=1 "${files[@]}" >"$build_dir/fuzz-$t-regressions.log" 2>&1; then
    echo "$t: ${#files[@]} reproducers pass"
  else
    echo "$t: REGRESSION FAILS (log: $build_dir/fuzz-$t-regressions.log)"; return 1
  fi
}

fuzz_one() {
  local t="$1" bin="$build_dir/fuzz/$1"
  local work="$build_dir/fuzz-corpus/$t" artifacts="$build_dir/fuzz-artifacts/$t" log="$build_dir/fuzz-$t.log"
  mkdir -p "$work" "$artifacts"
  local limit=(-max_total_time="$time_s"); [[ -n "$runs" ]] && limit=(-runs="$runs")
  local what="${time_s}s"; [[ -n "$runs" ]] && what="$runs runs"
  echo "== $t ($what)" >&2
  local start rc secs execs cov corpus artifact why
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$bin" "${limit[@]}" -timeout=30 -rss_limit_mb=3072 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} "$work" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [[ -n "$execs" ]] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
  corpus=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1)
  artifact=$(sed -n 's/.*Test unit written to \(.*\)/\1/p' "$log" | tail -1)
  if ((rc != 0)) || [[ -n "$artifact" ]]; then
    why=$(grep -m1 -E 'Assertion|ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|HALO_FUZZ_STRICT|ERROR: libFuzzer|SUMMARY:' "$log" || true)
    echo "$t: CRASH after ${execs:-?} executions, ${secs}s, ${cov:-cov ?}: ${why:-exit $rc}; reproducer: ${artifact:-none} (log: $log)"
    return 1
  fi
  echo "$t: ok, ${execs:-?} executions in ${secs}s, ${cov:-cov ?}, ${corpus:-corp ?}"
}

for t in "${targets[@]}"; do
  [[ -x "$build_dir/fuzz/$t" ]] || { echo "fuzz.sh: $build_dir/fuzz/$t not built" >&2; exit 2; }
done
# Up to --jobs targets at once (each libFuzzer run is one process on one core);
# the summary keeps the targets' order.
set +e
running=0
for t in "${targets[@]}"; do
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
  if ((regressions)); then run=replay_one; else run=fuzz_one; fi
  ( $run "$t" >"$build_dir/fuzz-$t.summary"; echo $? >"$build_dir/fuzz-$t.status"; cat "$build_dir/fuzz-$t.summary" ) &
  running=$((running + 1))
done
wait
set -e
status=0
summary=()
for t in "${targets[@]}"; do
  summary+=("$(cat "$build_dir/fuzz-$t.summary")")
  [[ "$(cat "$build_dir/fuzz-$t.status")" == 0 ]] || status=1
done

echo
echo "fuzz summary:"
printf '  %s\n' "${summary[@]}"
exit $status
