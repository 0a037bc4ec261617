#!/usr/bin/env bash
# Benchmarks, each side by side with its anchor in one run (figures go to docs/benchmarks.md).
#
#   scripts/bench.sh store     ddprun-rendezvous vs torch 1.13's TCPStore server
#   scripts/bench.sh launcher  ddprun vs torchrun 1.13: launch, peak RSS, restart (1 and 2 nodes)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh > /dev/null
scripts/build.sh --release > /dev/null
case "${1:-store}" in
  store)
    /usr/bin/python3 tests/bench/bench_store.py --bench build-release/tests/bench/ddprun-store-bench \
      --daemon build-release/rendezvous/ddprun-rendezvous "${@:2}" ;;
  launcher)
    /usr/bin/python3 tests/bench/bench_launcher.py --ddprun build-release/launcher/ddprun "${@:2}" ;;
  *) echo "bench: unknown benchmark '$1' (store, launcher)" >&2; exit 2 ;;
esac
