#!/usr/bin/env bash
# Installs what halo needs to build and test from Debian 12 packages (and npm
# for the JavaScript reference clients). Idempotent: installs only what is
# missing, so a second run does nothing.
#   scripts/install-deps.sh          build dependencies
#   scripts/install-deps.sh --test   also the test references (numpy, jinja2, node)
#   scripts/install-deps.sh --fuzz   also clang 16 and libFuzzer (scripts/fuzz.sh)
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  libyaml-cpp-dev libboost-dev libboost-filesystem-dev libdlpack-dev libze-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev libutf8proc-dev libdnnl-dev
  # libdnnl-dev only recommends it, but its CMake config requires OpenCL.
  ocl-icd-opencl-dev
  # Hugging Face Hub downloads (HTTPS) and the CA bundle they verify against.
  libcurl4-openssl-dev libssl-dev ca-certificates
  # The quick start's example request.
  curl
  # halo serve's KServe v2 / Triton gRPC frontend (core/grpc): grpc++, protobuf, protoc and its gRPC plugin.
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # KV cache events for prefix-aware routers (--kv-events-config): ZeroMQ and msgpack-c's C++ headers.
  libzmq3-dev libmsgpack-cxx-dev
)
test_pkgs=(python3 python3-numpy python3-jinja2 nodejs npm
  # The Python package (python/, pybind11) and its pytest suite; pip/venv/setuptools
  # for `pip install --no-build-isolation .`.
  python3-dev pybind11-dev python3-pytest python3-setuptools python3-pip python3-venv
  # Guided decoding tests validate outputs against their JSON schemas.
  python3-jsonschema
  # The web page's browser tests (tests/ui): playwright-core drives Debian's Chromium headless;
  # its fonts are only a recommendation, skipped by --no-install-recommends.
  chromium fonts-liberation
  # The KV events test's independent subscriber: ZeroMQ, msgpack and CBOR from Python.
  python3-zmq python3-msgpack python3-cbor2
  # scripts/replicas.sh and its test: HAProxy in front of the replicas, Prometheus scraping them.
  haproxy prometheus
  # tests/deploy: the manifests parsed, the Helm chart rendered by Go's text/template with sprig (no helm in Debian).
  python3-yaml golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev)
# clang-16 + libFuzzer: the fuzz targets (scripts/fuzz.sh, scripts/ci-sanitizers.sh fuzz).
fuzz_pkgs=(clang-16 libclang-rt-16-dev)

want=("${build_pkgs[@]}")
if [[ "${1:-}" == "--test" ]]; then want+=("${test_pkgs[@]}"); fi
if [[ "${1:-}" == "--fuzz" ]]; then want+=("${fuzz_pkgs[@]}"); fi

missing=()
for p in "${want[@]}"; do
  # node/npm may come from outside Debian (e.g. NodeSource): a working binary counts.
  if [[ "$p" == nodejs ]] && command -v node >/dev/null; then continue; fi
  if [[ "$p" == npm ]] && command -v npm >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all Debian packages present"
fi

if [[ "${1:-}" == "--test" ]]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  if [[ ! -d "$here/tests/js/node_modules/@huggingface/tokenizers" || ! -d "$here/tests/js/node_modules/openai" ||
        ! -d "$here/tests/js/node_modules/node-llama-cpp" || ! -d "$here/tests/js/node_modules/playwright-core" ||
        ! -d "$here/tests/js/node_modules/ajv" ]]; then
    echo "install-deps: npm ci in tests/js"
    # node-llama-cpp: its prebuilt llama.cpp binaries come as npm packages;
    # its postinstall step must not try to download or build anything else
    # (--ignore-scripts: no package here needs one, and Debian 12's Node 18
    # cannot run node-llama-cpp's, which wants Node 20).
    (cd "$here/tests/js" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  fi
fi
