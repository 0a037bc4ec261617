#!/usr/bin/env bash
# Configures and builds ddprun with CMake + Ninja.
#
#   scripts/build.sh            RelWithDebInfo build in build/
#   scripts/build.sh --asan     AddressSanitizer + UBSan build in build-asan/
#   scripts/build.sh --release  Release build in build-release/ (what the benchmarks use)
#   scripts/build.sh --main     what the main job runs (scripts/run-example.sh), in build-main/:
#                               ddprun, ddprun-rendezvous and the runtime library, no tests or
#                               benchmarks (so neither Catch2 nor their other packages are needed),
#                               optimized as build/ but without debug information: a quarter less
#                               compile time on a fresh machine (docs/benchmarks.md)
# Extra arguments after the mode go to CMake (e.g. -DDDPRUN_WITH_NCCL=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
targets=()  # none: every target
case "${1:-}" in
  --asan) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DDDPRUN_SANITIZE=ON); shift ;;
  --release) dir=build-release; args=(-DCMAKE_BUILD_TYPE=Release); shift ;;
  --main)
    dir=build-main
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_BUILD_TESTS=OFF -DDDPRUN_BUILD_BENCHMARKS=OFF
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
    # ddprun_relay_handoff: the shim ddprun preloads into its workers under a token.
    targets=(--target ddprun ddprun-rendezvous ddprun_relay_handoff ddprun_runtime)
    shift
    ;;
esac
cmake -S . -B "$dir" -G Ninja "${args[@]}" "$@" > /dev/null
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
echo "build: $dir ready"
