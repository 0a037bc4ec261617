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
subnet=10.234.0
source "$(dirname "$0")/hosts.sh"
make_hosts 2
test_budget 90  # half of CTest's 180 s: a wait that gives up has time to say what it saw

for i in 1 2; do
  ip netns exec "${tag}$i" env DDPRUN_BACKEND=gloo DDPRUN_TIMEOUT=60 "$ddprun" --nnodes 2 \
    --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 10.234.0.1:29413 --rdzv-id netruntime \
    --no-python "$check" > "$dir/out.$i" 2> "$dir/err.$i" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait_exit "$p" 90 "agent $p"
  ((code == 0)) || status=$code
done
cat "$dir"/out.*
passed=$(cat "$dir"/out.* | grep -c "checks passed (backend gloo, world 4)" || true)
if [[ $status -ne 0 || $passed -ne 4 ]]; then
  fail "exit status $status, $passed of 4 ranks passed"
fi
echo "runtime across two hosts: 4 ranks passed every collective over Gloo"
