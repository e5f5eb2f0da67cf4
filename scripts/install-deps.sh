#!/usr/bin/env bash
# Installs everything hotcold builds and tests with: Debian's packages, and one npm package for the
# suite (the official openai client for Node.js, into tests/node/node_modules, as its lock file says).
# Safe to run again: what is already there is skipped. Needs root (or sudo) for apt-get.
#   --minimal    only what configuring, building and running hotcold needs (the README's first
#                command): not the programs the test suite drives (clang for the fuzzers, Chromium,
#                Prometheus, Node.js and the openai client, curl, strace, patchelf, pyzmq, hipcc)
#   --with-hip   Debian's hipcc (ROCm's HIP compiler and runtime) even with --minimal: the AMD back end
#                (-DHOTCOLD_GPU=hip) builds. The full install has it too, so that ctest compiles every
#                GPU source as HIP (gpu.hip_compiles.*) and CI catches a source that does not.
set -euo pipefail

with_hip=0
minimal=0
for arg in "$@"; do
  case "$arg" in
    --with-hip) with_hip=1 ;;
    --minimal) minimal=1 ;;
    *) echo "install-deps: unknown option $arg (known: --minimal, --with-hip)" >&2; exit 2 ;;
  esac
done

# What configuring, building and running hotcold needs (the test libraries too: CMake configures the
# suite by default, and they are small).
packages=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev                        # CAF 0.17: the actor runtime (its OpenSSL module links the stages)
  libssl-dev                        # OpenSSL: TLS for stage links, hotcold keygen --tls
  libzmq3-dev cppzmq-dev            # ZeroMQ client wire
  libboost-dev                      # Boost.Asio / Beast: HTTP metrics and dashboard
  nlohmann-json3-dev                # JSON
  libcli11-dev                      # command line
  libfmt-dev libspdlog-dev          # formatting, logging
  libgtest-dev libgmock-dev         # GoogleTest
  libbenchmark-dev                  # Google Benchmark
  zlib1g-dev                        # the dashboard test reads its screenshot with zlib
  libpcre2-dev                      # Unicode-aware pre-tokenizer regexes
  libedit-dev                       # line editing for hotcold chat (readline API, BSD licence)
  liburing-dev                      # io_uring: the disk tier's reads of cold rows (engine/disk_reads)
  prometheus-cpp-dev                # metrics: registry, histograms, text exposition (/metrics)
)
# What the test suite drives besides.
if [ "$minimal" -eq 0 ]; then
  packages+=(
    clang libclang-rt-14-dev        # libFuzzer + sanitizers for tests/fuzz
    python3 python3-zmq             # the example Python client (clients/hotcold_client.py) and its test
    prometheus                      # promtool: the suite checks /metrics with it
    chromium                        # the dashboard test: headless Chromium
    strace                          # the recorder test checks that each record is one write(2)
    universal-ctags                 # the house's size rules (tests/house): each function's lines and parameters
    patchelf                        # gpu_check/gpu-bundle: its programs find their libraries beside them
    curl nodejs                     # the /v1 API tests: curl -N, and the openai client for Node.js
  )
  with_hip=1                        # gpu.hip_compiles.*: every GPU source compiled as HIP
fi
if [ "$with_hip" -eq 1 ]; then
  packages+=(hipcc)                 # HIP: clang with the AMD offload targets, libamdhip64
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# npm comes with some builds of nodejs (NodeSource's) and as its own package with Debian's.
[ "$minimal" -eq 1 ] || command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: packages done"
fi

[ "$minimal" -eq 0 ] || exit 0
# The npm packages of the suite (the openai client; ajv and ajv-formats, the JSON Schema validator its
# structured outputs are checked with; puppeteer-core, which drives Debian's chromium through the chat
# page), at the versions tests/node/package-lock.json records.
node_dir="$(cd "$(dirname "$0")/../tests/node" && pwd)"
if [ -f "$node_dir/node_modules/openai/package.json" ] && [ -f "$node_dir/node_modules/ajv-formats/package.json" ] &&
   [ -f "$node_dir/node_modules/puppeteer-core/package.json" ]; then
  echo "install-deps: openai, ajv, puppeteer-core (npm) present"
else
  npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error
  echo "install-deps: openai, ajv, puppeteer-core (npm) installed in tests/node"
fi
