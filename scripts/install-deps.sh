#!/usr/bin/env bash
# Installs what halo needs to build and test from Debian 12 packages (and npm
# for the JavaScript reference clients). Idempotent: installs only what is
# missing, so a second run does nothing.
#   scripts/install-deps.sh          build dependencies
#   scripts/install-deps.sh --test   also the test references (numpy, jinja2, node;
#                                    a Node 20 from npm in .tools/node when the system's is older)
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
# clang-16 + libFuzzer: the fuzz targets (scripts/fuzz.sh) and CI's clang ASan build
# (scripts/ci-sanitizers.sh), whose oneDNN backend needs clang's OpenMP runtime.
fuzz_pkgs=(clang-16 libclang-rt-16-dev libomp-16-dev)

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

# The Node tests need Node >= 20 (node-llama-cpp, the OpenAI Agents SDK), as CI
# has; Debian 12 ships 18. npm's node-<os>-<arch> package is the official
# binary: it goes to .tools/node (git-ignored), which CMake's HALO_NODE prefers
# (tests/CMakeLists.txt).
node_pin=20.20.2
ensure_node20() {
  local here="$1" major arch
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if ((major >= 20)) || [[ -x "$here/.tools/node/node_modules/.bin/node" ]]; then return; fi
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; *) arch="" ;; esac
  if [[ -z "$arch" ]]; then
    echo "install-deps: Node $major is older than 20 and npm has no Node binary for $(uname -m): the Node 20 tests will skip"
    return
  fi
  echo "install-deps: Node $major is older than 20: npm's node-linux-$arch@$node_pin into .tools/node"
  npm install --prefix "$here/.tools/node" --no-save --no-audit --no-fund --loglevel=error --ignore-scripts \
    "node-linux-$arch@$node_pin"
}

if [[ "${1:-}" == "--test" ]]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  ensure_node20 "$here"
  # npm runs on the Node the tests use: packages for Node >= 20 only (the Agents
  # SDK's MCP client, node-llama-cpp's binaries) are optional and npm installs
  # them only when the Node that runs it is new enough.
  [[ -x "$here/.tools/node/node_modules/.bin/node" ]] && export PATH="$here/.tools/node/node_modules/.bin:$PATH"
  mods="$here/tests/js/node_modules"
  want_mods=(@huggingface/tokenizers openai node-llama-cpp playwright-core ajv)
  (($(node -p 'process.versions.node.split(".")[0]') >= 20)) && want_mods+=(@modelcontextprotocol/client)
  for m in "${want_mods[@]}"; do
    [[ -d "$mods/$m" ]] && continue
    echo "install-deps: npm ci in tests/js"
    # --ignore-scripts: no package here needs its install step (node-llama-cpp's
    # prebuilt llama.cpp binaries come as npm packages; nothing else is
    # downloaded or built).
    (cd "$here/tests/js" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    break
  done
fi
