#!/usr/bin/env bash
# The main job, from a fresh machine: installs dependencies, builds ddprun, starts the
# ddprun-rendezvous daemon and runs a real 2-process PyTorch (torch 1.13, gloo) job whose
# ranks rendezvous through it (init_process_group + all_reduce + barrier).
#
#   scripts/run-example.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec /usr/bin/python3 tests/interop/interop.py allreduce --python /usr/bin/python3 \
  --daemon build/rendezvous/ddprun-rendezvous --world 2
