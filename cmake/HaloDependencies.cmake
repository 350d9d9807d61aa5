# Every third-party dependency comes from a Debian 12 package
# (scripts/install-deps.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
# Every C and C++ file is compiled with -pthread: gRPC's and ZeroMQ's usage
# requirements add it to some targets, and a precompiled header (HaloPch.cmake)
# must see the same predefined macros (_REENTRANT) in every file that uses it
# (clang refuses it otherwise, GCC ignores it).
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-pthread>")
find_package(dlpack CONFIG REQUIRED)
find_package(nlohmann_json 3.10 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS filesystem)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
# KV cache events (core/serve/kv_event_publisher): a ZeroMQ PUB/ROUTER pair, msgpack payloads.
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
find_package(msgpack CONFIG REQUIRED)  # Debian's libmsgpack-cxx-dev: target msgpackc-cxx
# Hugging Face Hub downloads (core/model/hf_hub.cpp): libcurl4-openssl-dev;
# libssl-dev (optional) lets them verify the sha256 of LFS files.
find_package(CURL REQUIRED)
find_package(OpenSSL QUIET COMPONENTS Crypto)

if(HALO_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(HALO_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG QUIET)
  if(NOT benchmark_FOUND)
    message(STATUS "halo: Google Benchmark not found, micro-benchmarks are skipped")
    set(HALO_BUILD_BENCHMARKS OFF)
  endif()
endif()

# Interpreter for the test references (numpy forward pass, jinja2). Debian's
# python3 is used on purpose: its python3-numpy / python3-jinja2 packages are
# what install-deps.sh provides, whatever other python is first on PATH.
find_program(HALO_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT HALO_PYTHON)
  find_program(HALO_PYTHON NAMES python3)
endif()
