# Sanitizer and fuzzer builds (docs/testing.md).
#
#   -DHALO_SANITIZE="address;undefined"   ASan + UBSan (GCC or clang)
#   -DHALO_SANITIZE=thread                TSan
#   -DHALO_BUILD_FUZZERS=ON               libFuzzer targets in fuzz/ (clang >= 16);
#                                         implies HALO_SANITIZE=address;undefined
#
# The flags go on every C and C++ target (libraries, executables, the
# dlopen'ed plugin MODULEs), compile and link, so a plugin is instrumented
# like the program that loads it; the sanitizer runtime comes with the
# executable. nvcc does not take these flags: a sanitized configure leaves the
# cuda plugin out (CMAKE_CUDA_COMPILER empty) unless a CUDA compiler is given
# explicitly, and then only its host C++ is instrumented.
set(HALO_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. \"address;undefined\" or \"thread\"")
option(HALO_BUILD_FUZZERS "Build the libFuzzer targets in fuzz/ (clang; ASan+UBSan)" OFF)
# UBSan checks to leave out, e.g. "vptr;null": CI's quick run drops the ones
# that cost most compile time and that ASan already reports (docs/testing.md).
set(HALO_UBSAN_SKIP "" CACHE STRING "UBSan checks not to instrument (-fno-sanitize=...)")

if(HALO_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "HALO_BUILD_FUZZERS needs clang (libFuzzer): configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ (not ${CMAKE_CXX_COMPILER_ID})")
  endif()
  if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 16)
    message(WARNING "HALO_BUILD_FUZZERS: clang ${CMAKE_CXX_COMPILER_VERSION} may reject halo's C++20 (lambdas "
                    "capturing structured bindings need clang 16); Debian 12: clang-16 libclang-rt-16-dev")
  endif()
  if(NOT HALO_SANITIZE)
    set(HALO_SANITIZE "address;undefined" CACHE STRING "" FORCE)
  endif()
endif()

if(HALO_SANITIZE)
  set(_halo_known address undefined thread leak)
  foreach(s IN LISTS HALO_SANITIZE)
    if(NOT s IN_LIST _halo_known)
      message(FATAL_ERROR "HALO_SANITIZE: unknown sanitizer '${s}' (one of: ${_halo_known})")
    endif()
  endforeach()
  if("thread" IN_LIST HALO_SANITIZE AND ("address" IN_LIST HALO_SANITIZE OR "leak" IN_LIST HALO_SANITIZE))
    message(FATAL_ERROR "HALO_SANITIZE: thread cannot be combined with address or leak")
  endif()
  list(JOIN HALO_SANITIZE "," _halo_san)
  set(_halo_cc "$<COMPILE_LANGUAGE:C,CXX>")
  add_compile_options("$<${_halo_cc}:-fsanitize=${_halo_san}>" "$<${_halo_cc}:-fno-omit-frame-pointer>")
  # Reports need file and line: line tables (-g1) when the build type has no
  # debug info of its own. Full -g makes sanitized code much slower to compile
  # (a third of the build time), so CI asks for -g1 in its RelWithDebInfo flags.
  string(TOUPPER "${CMAKE_BUILD_TYPE}" _halo_bt)
  if(NOT "${CMAKE_CXX_FLAGS_${_halo_bt}} ${CMAKE_CXX_FLAGS}" MATCHES "(^| )-g")
    add_compile_options("$<${_halo_cc}:-g1>")
  endif()
  if("undefined" IN_LIST HALO_SANITIZE)
    # A UBSan report fails the run instead of scrolling by.
    add_compile_options("$<${_halo_cc}:-fno-sanitize-recover=undefined>")
    if(HALO_UBSAN_SKIP)
      list(JOIN HALO_UBSAN_SKIP "," _halo_skip)
      add_compile_options("$<${_halo_cc}:-fno-sanitize=${_halo_skip}>")
      message(STATUS "halo: UBSan checks left out: ${_halo_skip}")
    endif()
  endif()
  if(HALO_BUILD_FUZZERS)
    # Coverage feedback for libFuzzer in every library; the fuzz targets add
    # -fsanitize=fuzzer (libFuzzer's main) themselves.
    add_compile_options("$<${_halo_cc}:-fsanitize=fuzzer-no-link>")
  endif()
  add_link_options("-fsanitize=${_halo_san}")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC's flow analysis misreads instrumented code: with UBSan's null checks
    # it reports std::regex's own std::function members as maybe-uninitialized
    # (libstdc++'s regex_automaton.h). The Release build keeps the warning.
    add_compile_options("$<${_halo_cc}:-Wno-maybe-uninitialized>")
  endif()
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # clang links its sanitizer runtime statically into executables only, so
    # the plugin MODULEs (linked with --no-undefined) could not resolve it:
    # use the shared runtime everywhere, found through an rpath.
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-resource-dir OUTPUT_VARIABLE _halo_rd OUTPUT_STRIP_TRAILING_WHITESPACE)
    add_link_options(-shared-libsan "LINKER:-rpath,${_halo_rd}/lib/linux")
  endif()
  # ASan's shared runtime, for programs that are not instrumented but load
  # instrumented code (python3 and the halo extension module: tests/python).
  if("address" IN_LIST HALO_SANITIZE)
    if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      set(_halo_rt_name libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so)
    else()
      set(_halo_rt_name libasan.so)
    endif()
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${_halo_rt_name}
                    OUTPUT_VARIABLE HALO_SANITIZER_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT IS_ABSOLUTE "${HALO_SANITIZER_RUNTIME}" OR NOT EXISTS "${HALO_SANITIZER_RUNTIME}")
      set(HALO_SANITIZER_RUNTIME "")
    endif()
  endif()
  # Release's -O3 hides too much from the reports; keep it fast but readable.
  if(CMAKE_BUILD_TYPE STREQUAL "Release")
    message(STATUS "halo: HALO_SANITIZE with a Release build: consider RelWithDebInfo")
  endif()
  # nvcc takes none of these flags: leave the cuda plugin out unless asked for.
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER "" CACHE FILEPATH "CUDA compiler (left empty by HALO_SANITIZE: the cuda plugin is not built)")
  endif()
  # The conformance suite's own nested ASan build is redundant in a sanitized tree.
  set(HALO_CONFORMANCE_ASAN OFF CACHE BOOL "" FORCE)
  message(STATUS "halo: sanitizers: ${_halo_san}")
endif()

# How much slower than Release the tests' programs run: timing-bound tests
# (the serve end-to-end suites) multiply their waits, latency bounds and
# ctest TIMEOUT by it (environment HALO_TEST_SLOWDOWN).
set(HALO_TEST_SLOWDOWN 1)
if("thread" IN_LIST HALO_SANITIZE)
  set(HALO_TEST_SLOWDOWN 20)
elseif("address" IN_LIST HALO_SANITIZE)
  set(HALO_TEST_SLOWDOWN 3)
endif()
