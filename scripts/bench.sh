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
#                              against ddprun-rendezvous and etcd: time, store CPU and RSS, ops/node;
#                              a spare taking a SIGKILLed one's place, the health gate per node
#   scripts/bench.sh goodput   a 2-node training job through a trace of failures (crash, hang,
#                              SIGKILL, cut-off, preemption, lemon node): ddprun with and without a
#                              spare vs torchrun 2.6 and 1.13; draws docs/img/goodput.png itself
#   scripts/bench.sh metrics   what a /metrics scrape costs the agent at 64 ranks, beside /healthz
#                              and a 404 from the same server (the floor)
#   scripts/bench.sh patterns  the agent's CPU for a rank printing 10,000 lines/s: prefixed, with
#                              --progress/--start/--fail-pattern, with --log-time (and the regex
#                              engines per line: std::regex vs glibc regexec)
#   scripts/bench.sh plot      draw bench-results/*.json into docs/img/*.png (scripts/plot_benchmarks.py)
#   scripts/bench.sh all       every benchmark above in turn, then plot (about an hour on 2 cores)
#
# Each benchmark also writes its tables as JSON to bench-results/<name>.json (git-ignored), which
# `plot` draws. On a shared machine run it under `flock /tmp/ddprun-bench.lock`.
set -euo pipefail
cd "$(dirname "$0")/.."
benches=(store relay relay-delay launcher allreduce hang rendezvous scale goodput metrics patterns)
case "${1:-store}" in
  plot)
    exec /usr/bin/python3 scripts/plot_benchmarks.py --results bench-results --out docs/img "${@:2}" ;;
  all)
    # One run of each with its defaults, one after the other (never two at once: they would
    # measure each other), then the plots. A bench that fails is named at the end; the others
    # still run and plot.
    if (($# > 1)); then
      echo "bench: error: 'all' takes no options (each bench runs with its defaults; run one bench to pass options)" >&2
      exit 2
    fi
    failed=()
    for bench in "${benches[@]}"; do
      echo "bench: $bench ($(date -u +%H:%M:%S))" >&2
      "$0" "$bench" || failed+=("$bench")
    done
    "$0" plot
    if ((${#failed[@]})); then
      echo "bench: error: ${failed[*]} failed (their plots are skipped or from their last run)" >&2
      exit 1
    fi
    exit 0 ;;
esac
if [[ " ${benches[*]} " != *" ${1:-store} "* ]]; then  # before the build, which takes minutes
  echo "bench: unknown benchmark '$1' (${benches[*]}, plot, all)" >&2
  exit 2
fi
scripts/install-deps.sh > /dev/null
scripts/build.sh --release > /dev/null
mkdir -p bench-results
json=(--json "bench-results/${1:-store}.json")
case "${1:-store}" in
  store)
    /usr/bin/python3 tests/bench/bench_store.py --bench build-release/tests/bench/ddprun-store-bench \
      --daemon build-release/rendezvous/ddprun-rendezvous "${json[@]}" "${@:2}" ;;
  relay)
    /usr/bin/python3 tests/bench/bench_relay.py --bench build-release/tests/bench/ddprun-store-bench \
      --daemon build-release/rendezvous/ddprun-rendezvous "${json[@]}" "${@:2}" ;;
  relay-delay)
    /usr/bin/python3 tests/bench/bench_relay_delay.py \
      --bench build-release/tests/bench/ddprun-store-bench \
      --daemon build-release/rendezvous/ddprun-rendezvous \
      --forwarder build-release/tests/bench/ddprun-delay-forwarder "${json[@]}" "${@:2}" ;;
  launcher)
    /usr/bin/python3 tests/bench/bench_launcher.py --ddprun build-release/launcher/ddprun "${json[@]}" "${@:2}" ;;
  allreduce)
    /usr/bin/python3 tests/bench/bench_allreduce.py --ddprun build-release/launcher/ddprun \
      --allreduce-bench build-release/examples/allreduce_bench "${json[@]}" "${@:2}" ;;
  hang)
    /usr/bin/python3 tests/bench/bench_hang.py --ddprun build-release/launcher/ddprun "${json[@]}" "${@:2}" ;;
  rendezvous)
    /usr/bin/python3 tests/bench/bench_rendezvous.py --ddprun build-release/launcher/ddprun "${json[@]}" "${@:2}" ;;
  goodput)
    /usr/bin/python3 tests/bench/bench_goodput.py --ddprun build-release/launcher/ddprun \
      --plot docs/img/goodput.png "${json[@]}" "${@:2}" ;;
  patterns)
    build-release/tests/bench/ddprun-regex-engines
    /usr/bin/python3 tests/bench/bench_log_patterns.py --ddprun build-release/launcher/ddprun "${json[@]}" "${@:2}" ;;
  metrics)
    /usr/bin/python3 tests/bench/bench_metrics.py --ddprun build-release/launcher/ddprun "${json[@]}" "${@:2}" ;;
  scale)
    /usr/bin/python3 tests/bench/bench_scale.py --sim build-release/tests/bench/ddprun-scale-sim \
      --daemon build-release/rendezvous/ddprun-rendezvous "${json[@]}" "${@:2}" ;;
esac
