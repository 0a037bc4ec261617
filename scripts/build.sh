#!/usr/bin/env bash
# Configures and builds ddprun with CMake + Ninja.
#
#   scripts/build.sh            RelWithDebInfo build in build/
#   scripts/build.sh --asan     AddressSanitizer + UBSan build in build-asan/
#   scripts/build.sh --release  Release build in build-release/ (what the benchmarks use)
# Extra arguments after the mode go to CMake (e.g. -DDDPRUN_WITH_NCCL=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
case "${1:-}" in
  --asan) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DDDPRUN_SANITIZE=ON); shift ;;
  --release) dir=build-release; args=(-DCMAKE_BUILD_TYPE=Release); shift ;;
esac
cmake -S . -B "$dir" -G Ninja "${args[@]}" "$@" > /dev/null
cmake --build "$dir" -j "$(nproc)"
echo "build: $dir ready"
