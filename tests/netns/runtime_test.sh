#!/usr/bin/env bash
# The worker runtime across hosts: two network namespaces with their own addresses (joined by a
# bridge) run one ddprun job of 2 nodes x 2 workers; every collective of collectives_check must
# pass over Gloo, which only works if each rank's transport listens on its node's address (an
# address of 127.0.0.1 would point the peers on the other host at themselves).
#
#   runtime_test.sh DDPRUN COLLECTIVES_CHECK     (exit 77 = skipped: needs root and `ip netns`)
set -euo pipefail
ddprun=$1
check=$2
tag="dr$$"
hub="${tag}h"
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ns in "$hub" "${tag}1" "${tag}2"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

if [[ $EUID -ne 0 ]] || ! ip netns add "$hub" 2>/dev/null; then
  echo "skipped: needs root and network namespaces (ip netns add)"
  exit 77
fi
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for i in 1 2; do
  ns="${tag}$i"
  ip netns add "$ns"
  ip link add "v$i" netns "$ns" type veth peer name "b$i" netns "$hub"
  ip -n "$hub" link set "b$i" master br0 up
  ip -n "$ns" addr add "10.234.0.$i/24" dev "v$i"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "v$i" up
done

for i in 1 2; do
  ip netns exec "${tag}$i" env DDPRUN_BACKEND=gloo DDPRUN_TIMEOUT=60 "$ddprun" --nnodes 2 \
    --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 10.234.0.1:29413 --rdzv-id netruntime \
    "$check" > "$dir/out.$i" 2> "$dir/err.$i" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
pids=()
cat "$dir"/out.*
passed=$(cat "$dir"/out.* | grep -c "checks passed (backend gloo, world 4)" || true)
if [[ $status -ne 0 || $passed -ne 4 ]]; then
  echo "FAIL: exit status $status, $passed of 4 ranks passed"
  tail -n 30 "$dir"/err.*
  exit 1
fi
echo "runtime across two hosts: 4 ranks passed every collective over Gloo"
