#!/usr/bin/env bash
# The main job, from a fresh machine: installs its packages, builds what it runs (ddprun,
# ddprun-rendezvous, the runtime library; scripts/test.sh installs and builds the rest), and runs a
# real data-parallel PyTorch training job (examples/train_ddp.py: torch 1.13, gloo,
# DistributedSampler, DistributedDataParallel, rank 0 saving a checkpoint) under ddprun with 4
# workers. The job checks that the loss falls and that every rank ends with identical parameters.
# A second run is seconds: nothing to install, nothing to rebuild.
#
#   scripts/run-example.sh            standalone, 4 workers
#   scripts/run-example.sh --2nodes   two agents (c10d on 127.0.0.1), 2 workers each
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "" | --2nodes) ;;
  *) echo "run-example: error: unknown argument '$1'; use --2nodes or nothing" >&2; exit 2 ;;
esac
# Debian's torch is most of the packages: it downloads and unpacks while ddprun builds (dpkg takes
# one core, the compiler the others). Its output is the few lines install-deps prints.
scripts/install-deps.sh --build
scripts/install-deps.sh --torch &
torch_install=$!
if ! scripts/build.sh --main; then
  wait "$torch_install" || true  # apt is left to finish, never cut off
  exit 1
fi
wait "$torch_install"
export PYTHON_EXEC=/usr/bin/python3  # Debian's torch 1.13 (the python3 first on PATH may have none)
checkpoint=$(mktemp -d)/model.pt
if [[ "${1:-}" == "--2nodes" ]]; then
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for node in 0 1; do
    build-main/launcher/ddprun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id example \
      examples/train_ddp.py --epochs 5 --checkpoint "$checkpoint" &
  done
  wait -n && wait -n
else
  build-main/launcher/ddprun --standalone --nproc-per-node 4 examples/train_ddp.py --epochs 5 \
    --checkpoint "$checkpoint"
fi
