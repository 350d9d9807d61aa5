#!/usr/bin/env bash
# Sanitizer and fuzzing checks, run by .ci/run after the README's test
# command (docs/testing.md has what each phase covers and how long it takes):
#   asan  -DHALO_SANITIZE="address;undefined" with every UBSan check: the whole
#         suite (ctest), halo and its plugins instrumented. With clang-16 and
#         libFuzzer installed (install-deps.sh --fuzz) it is a clang build that
#         also holds the fuzz targets (-DHALO_BUILD_FUZZERS=ON), so the fuzz
#         phase builds nothing; else GCC, and fuzz builds its own tree
#   tsan  GCC, -DHALO_SANITIZE=thread: the engine and server concurrency tests
#         (engine, scheduler, KV blocks and forks, shared prompts, beams,
#         AsyncEngine, serving core, HTTP; the serve e2e tests load,
#         disconnect, admission, hostile, kv_events, grpc, grpc_load, beam_search)
#   fuzz  clang + libFuzzer: every target of fuzz/ for a short bounded run
#         (scripts/fuzz.sh), after replaying the reproducers of fixed crashes;
#         one target per core at a time; the asan phase's targets when it
#         built them, else its own build (build-fuzz)
#
#   scripts/ci-sanitizers.sh [--build-root DIR] [--fuzz-time S] [PHASE...]
#
#   --build-root D build directories D/build-asan, D/build-tsan, D/build-fuzz
#                  (default: the repository root)
#   --fuzz-time S  seconds per fuzz target (default 30)
#   PHASE          asan, tsan, fuzz (default: all three)
#
# A phase whose toolchain is missing (clang/libFuzzer for fuzz) is skipped
# with the reason; every other failure fails the script, after all phases ran.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

root="$here" fuzz_time=30 phases=()
while (($#)); do
  case "$1" in
    --build-root) root="$2"; shift 2 ;;
    --fuzz-time) fuzz_time="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    asan|tsan|fuzz) phases+=("$1"); shift ;;
    *) echo "ci-sanitizers.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
((${#phases[@]})) || phases=(asan tsan fuzz)

jobs=$(nproc 2>/dev/null || echo 2)
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# Sanitized code at -O1 with line tables (-g1): reports name file and line, and
# the build is about a third faster than with full debug info (-g).
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1"
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DHALO_BUILD_BENCHMARKS=OFF)

results=()
failed=0
phase_start=0
begin() { phase_start=$(date +%s); echo; echo "==== ci-sanitizers: $1"; }
finish() {  # finish NAME STATUS [NOTE]
  local secs=$(( $(date +%s) - phase_start ))
  local line="$1: $2 in $((secs / 60))m$((secs % 60))s${3:+ ($3)}"
  results+=("$line")
  echo "==== ci-sanitizers: $line"
  [[ "$2" == failed ]] && failed=1
  return 0
}

# halt on the first report; the server's children inherit these through ctest
# and the Node tests (they spawn the halo binary with the environment).
asan_env() {
  export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  export LSAN_OPTIONS="suppressions=$root/build-asan/lsan.supp:print_suppressions=0"
}

# clang and libFuzzer's runtime for the fuzz targets; prints why not when missing.
fuzz_cxx="${CXX_FUZZ:-clang++-16}" fuzz_cc="${CC_FUZZ:-clang-16}"
have_libfuzzer() {
  if ! command -v "$fuzz_cxx" >/dev/null; then
    echo "$fuzz_cxx not found: scripts/install-deps.sh --fuzz installs clang-16 and libclang-rt-16-dev"; return 1
  fi
  local rt
  rt=$("$fuzz_cxx" -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)
  if [[ ! -f "$rt" ]] && ! ls "$("$fuzz_cxx" -print-resource-dir)"/lib/linux/libclang_rt.fuzzer*.a >/dev/null 2>&1; then
    echo "libFuzzer runtime not found (Debian: libclang-rt-16-dev)"; return 1
  fi
}

run_asan() {
  local b="$root/build-asan" toolchain=() label=GCC
  # One clang build serves the suite and the fuzz targets: the fuzz phase then
  # builds nothing (a GCC ASan build plus a clang fuzz build took 12 + 6 min).
  if have_libfuzzer >/dev/null; then
    toolchain=(-DCMAKE_C_COMPILER="$fuzz_cc" -DCMAKE_CXX_COMPILER="$fuzz_cxx" -DHALO_BUILD_FUZZERS=ON)
    label="$fuzz_cxx, with the fuzz targets"
  fi
  begin "asan (address;undefined; $label): build + ctest"
  if ! cmake -S . -B "$b" "${gen[@]}" "${common[@]}" "${toolchain[@]}" -DHALO_BUILD_TESTS=ON \
         -DHALO_SANITIZE="address;undefined" >/dev/null ||
     ! cmake --build "$b" -j "$jobs"; then
    finish asan failed "build"; return
  fi
  # Leaks in third-party code that never frees its one-time state.
  printf '%s\n' 'leak:libdnnl' 'leak:libgomp' 'leak:libcurl' 'leak:libcrypto' > "$b/lsan.supp"
  # Every test of the suite. The two that run oneDNN (Numerics.OneDnnMatmulBackend,
  # and halo bench latency, whose roofline asks the cpu plugin for its bf16 peak)
  # run on their own with leak detection off, because the exit-time leak scan
  # dies in oneDNN's libgomp worker threads ("Tracer caught signal 11").
  local onednn='(Numerics\.OneDnnMatmulBackend|integration_bench_latency)$' ok=1
  ( asan_env; ctest --test-dir "$b" -j "$jobs" --output-on-failure --timeout 1200 -E "^$onednn" ) || ok=0
  ( asan_env; export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    ctest --test-dir "$b" --output-on-failure --no-tests=error -R "^$onednn" ) || ok=0
  if ((ok)); then finish asan passed; else finish asan failed "ctest"; fi
}

run_tsan() {
  begin "tsan (thread): engine and server concurrency tests"
  local b="$root/build-tsan"
  if ! cmake -S . -B "$b" "${gen[@]}" "${common[@]}" -DHALO_BUILD_TESTS=ON -DHALO_SANITIZE=thread >/dev/null ||
     ! cmake --build "$b" -j "$jobs" --target engine_test engine_behaviour_test shared_prompt_test beam_engine_test \
         serve_unit_test serving_core_test halo halo_plugin_cpu; then
    finish tsan failed "build"; return
  fi
  # The engine (scheduler, KV blocks and their forks, shared prompts, beams, the
  # async engine's thread), the serving core and its preprocessing pool, HTTP,
  # gRPC and the KV event publisher's threads.
  local suites='AsyncEngine|Engine[A-Za-z]*|Scheduler|SchedulerGroup|SchedulerSpec|KvBlockManager|KvFork|KvTrim'
  suites+='|KvEvents|BlockHash|PrefixCache|SharedPrompt|BeamEngine|ParallelSampling|Sampler|SamplingParams'
  suites+='|HttpServer|ParseSampling|ApiErrors|ServingCore|PreprocessPool'
  local e2e='load|disconnect|admission|hostile|kv_events|grpc|grpc_load|beam_search'
  (
    # Libraries that are not instrumented (oneDNN, ZeroMQ, gRPC, Abseil): scripts/tsan.supp.
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$here/scripts/tsan.supp"
    ctest --test-dir "$b" -j "$jobs" --output-on-failure --timeout 1200 -R "^(($suites)\.|serve_($e2e)\$)"
  )
  if (($? == 0)); then finish tsan passed; else finish tsan failed "ctest"; fi
}

run_fuzz() {
  begin "fuzz (${fuzz_time}s per target, $jobs at once)"
  local why
  if ! why=$(have_libfuzzer); then finish fuzz skipped "$why"; return; fi
  local b="$root/build-fuzz" build=() ok=1
  # The asan phase's clang build holds the targets already.
  if grep -q '^HALO_BUILD_FUZZERS:BOOL=ON' "$root/build-asan/CMakeCache.txt" 2>/dev/null; then
    b="$root/build-asan" build=(--no-build)
    echo "fuzz: the targets of the asan phase's build ($b)"
  fi
  CC="$fuzz_cc" CXX="$fuzz_cxx" scripts/fuzz.sh --build-dir "$b" "${build[@]}" --jobs "$jobs" --regressions || ok=0
  CC="$fuzz_cc" CXX="$fuzz_cxx" scripts/fuzz.sh --build-dir "$b" --no-build --jobs "$jobs" --time "$fuzz_time" || ok=0
  if ((ok)); then finish fuzz passed; else finish fuzz failed "see the fuzz summary above"; fi
}

total_start=$(date +%s)
for p in "${phases[@]}"; do "run_$p"; done
total=$(( $(date +%s) - total_start ))
echo
echo "ci-sanitizers summary ($((total / 60))m$((total % 60))s):"
printf '  %s\n' "${results[@]}"
exit $failed
