#!/usr/bin/env bash
# The GPU tests, for a machine with an NVIDIA GPU, CUDA and NCCL (under /usr/local/cuda): builds
# ddprun, then runs the tests labelled gpu (the NCCL backend on host and device buffers, world
# size 1 per GPU; Gloo refusing a device buffer) and prints the NCCL all-reduce busbw table.
# Without a GPU they skip (77).
#
#   scripts/test-gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -L gpu -V
