#!/usr/bin/env bash
# Benchmarks, each side by side with its anchor in one run (figures go to docs/benchmarks.md).
#
#   scripts/bench.sh store     ddprun-rendezvous vs torch 1.13's TCPStore server
#   scripts/bench.sh relay     what the token, TLS and the relay cost, against a bare proxy (the floor)
#   scripts/bench.sh relay-delay  the relay against direct access across a link with a one-way delay
#                              of 0.1/0.5/2 ms (network namespaces and a delay forwarder; root)
#   scripts/bench.sh launcher  ddprun vs torchrun 1.13: launch, peak RSS, restart (1 and 2 nodes)
#   scripts/bench.sh allreduce ddprun's runtime (gloo) vs torch 1.13's gloo all_reduce, 2 and 4 ranks
#   scripts/bench.sh hang      hang -> new group running: ddprun --hang-timeout / FileTimer vs
#                              torchrun 2.6 and 1.13 (FileTimer); the agent's CPU per 1M reports
#   scripts/bench.sh rendezvous  etcd vs c10d: forming a round of 2/8/32 agents, an agent's death ->
#                              the survivors' new round running (torchrun 1.13 c10d beside, forming)
#   scripts/bench.sh scale     N simulated agents (256/1,024/4,096) forming and re-forming a round
#                              against ddprun-rendezvous and etcd: time, store CPU and RSS, ops/node
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh > /dev/null
scripts/build.sh --release > /dev/null
case "${1:-store}" in
  store)
    /usr/bin/python3 tests/bench/bench_store.py --bench build-release/tests/bench/ddprun-store-bench \
      --daemon build-release/rendezvous/ddprun-rendezvous "${@:2}" ;;
  relay)
    /usr/bin/python3 tests/bench/bench_relay.py --bench build-release/tests/bench/ddprun-store-bench \
      --daemon build-release/rendezvous/ddprun-rendezvous "${@:2}" ;;
  relay-delay)
    /usr/bin/python3 tests/bench/bench_relay_delay.py \
      --bench build-release/tests/bench/ddprun-store-bench \
      --daemon build-release/rendezvous/ddprun-rendezvous \
      --forwarder build-release/tests/bench/ddprun-delay-forwarder "${@:2}" ;;
  launcher)
    /usr/bin/python3 tests/bench/bench_launcher.py --ddprun build-release/launcher/ddprun "${@:2}" ;;
  allreduce)
    /usr/bin/python3 tests/bench/bench_allreduce.py --ddprun build-release/launcher/ddprun \
      --allreduce-bench build-release/examples/allreduce_bench "${@:2}" ;;
  hang)
    /usr/bin/python3 tests/bench/bench_hang.py --ddprun build-release/launcher/ddprun "${@:2}" ;;
  rendezvous)
    /usr/bin/python3 tests/bench/bench_rendezvous.py --ddprun build-release/launcher/ddprun "${@:2}" ;;
  scale)
    /usr/bin/python3 tests/bench/bench_scale.py --sim build-release/tests/bench/ddprun-scale-sim \
      --daemon build-release/rendezvous/ddprun-rendezvous "${@:2}" ;;
  *) echo "bench: unknown benchmark '$1' (store, relay, relay-delay, launcher, allreduce, hang, rendezvous, scale)" >&2; exit 2 ;;
esac
