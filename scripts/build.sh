#!/usr/bin/env bash
# Configures and builds ddprun with CMake + Ninja.
#
#   scripts/build.sh            RelWithDebInfo build in build/
#   scripts/build.sh --asan     AddressSanitizer + UBSan build in build-asan/
#   scripts/build.sh --release  Release build in build-release/ (what the benchmarks use)
#   scripts/build.sh --main     what the main job runs (scripts/run-example.sh), in build-main/:
#                               ddprun, ddprun-rendezvous and the runtime library, no tests or
#                               benchmarks (so neither Catch2 nor their other packages are needed),
#                               built for a short first run (docs/benchmarks.md, "The main job from
#                               a fresh machine"): -O1 and no debug information (the compiler's
#                               back end is most of the time), precompiled common headers, one
#                               compile more than the CPUs (apt unpacks PyTorch beside it), and
#                               warnings not fatal (-O1 brings false maybe-uninitialized ones; the
#                               test builds keep -Werror)
# Extra arguments after the mode go to CMake (e.g. -DDDPRUN_WITH_NCCL=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
targets=()  # none: every target
jobs=$(nproc)
case "${1:-}" in
  --asan) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DDDPRUN_SANITIZE=ON); shift ;;
  --release) dir=build-release; args=(-DCMAKE_BUILD_TYPE=Release); shift ;;
  --main)
    dir=build-main
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_BUILD_TESTS=OFF -DDDPRUN_BUILD_BENCHMARKS=OFF
      -DDDPRUN_PRECOMPILE_HEADERS=ON -DDDPRUN_WERROR=OFF
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG")
    jobs=$(($(nproc) + 1))
    # ddprun_relay_handoff: the shim ddprun preloads into its workers under a token.
    targets=(--target ddprun ddprun-rendezvous ddprun_relay_handoff ddprun_runtime)
    shift
    ;;
esac
cmake -S . -B "$dir" -G Ninja "${args[@]}" "$@" > /dev/null
cmake --build "$dir" -j "$jobs" "${targets[@]}"
echo "build: $dir ready"
