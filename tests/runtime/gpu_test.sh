#!/usr/bin/env bash
# The NCCL backend on a real GPU (world size 1 per GPU): every collective and data type with host
# buffers and with device buffers, then the all-reduce benchmark on device buffers; and the Gloo
# backend refusing a device buffer with a message instead of crashing.
# Exits 77 (skipped) without an NVIDIA GPU or without NCCL in the build.
#
#   gpu_test.sh DDPRUN COLLECTIVES_CHECK ALLREDUCE_BENCH HAVE_NCCL(ON|OFF)
set -euo pipefail
ddprun=$1 check=$2 bench=$3 have_nccl=$4
if [[ $have_nccl != ON ]]; then
  echo "gpu_test: SKIP: this build has no NCCL (CUDA/NCCL were not found at configure time)"
  exit 77
fi
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  echo "gpu_test: SKIP: no NVIDIA GPU on this machine"
  exit 77
fi
nvidia-smi -L
export DDPRUN_BACKEND=nccl DDPRUN_TIMEOUT=60
echo "--- host buffers"
"$ddprun" --standalone --nproc-per-node 1 --no-python "$check" | tee /dev/stderr | grep -q "checks passed (backend nccl"
echo "--- device buffers"
"$ddprun" --standalone --nproc-per-node 1 --no-python "$check" --device | tee /dev/stderr | grep -q "checks passed (backend nccl"
echo "--- all-reduce, device buffers"
"$ddprun" --standalone --nproc-per-node 1 --no-python "$bench" --device --max-bytes 256M
echo "--- gloo refuses device buffers"
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
if DDPRUN_BACKEND=gloo "$ddprun" --standalone --nproc-per-node 1 --no-python "$check" --device 2> "$errors"; then
  echo "gpu_test: gloo accepted a device buffer" >&2
  exit 1
fi
grep "is CUDA device memory, which the Gloo backend cannot use" "$errors"
echo "gpu_test: ok"
