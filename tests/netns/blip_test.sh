#!/usr/bin/env bash
# A network blip shorter than the node-liveness timeout is ridden out: two ddprun agents on two
# "hosts" (network namespaces joined by a bridge) run one job; host 2's link goes down for
# BLIP seconds (nothing is sent or received: TCP retransmits when it comes back) and up again.
# The job must go on with no restart and no re-form, and finish with both agents exiting 0.
# The liveness timeout is the default (keep_alive_interval 1 s x keep_alive_max_attempt 5).
#
#   blip_test.sh DDPRUN REPORT_SH [BLIP_SECONDS]     (exit 77 = skipped: needs root and `ip netns`)
set -euo pipefail
ddprun=$1
report=$2
blip=${3:-2}
tag="db$$"
subnet=10.234.0
source "$(dirname "$0")/hosts.sh"
make_hosts 2
test_budget 50  # well under CTest's 90 s: a wait that gives up has time to say what it saw

port=29431
until_file="$dir/stop"
for i in 1 2; do
  ip netns exec "${tag}$i" env LOGLEVEL=INFO "$ddprun" --nnodes 2 --nproc-per-node 1 \
    --rdzv-backend c10d --rdzv-endpoint "${subnet}.1:$port" --rdzv-id blipjob \
    --no-python "$report" --until "$until_file" > "$dir/out.$i" 2> "$dir/err.$i" &
  pids+=($!)
  eval "agent$i=$!"
  if [[ $i -eq 1 ]]; then
    wait_until 10 "agent 1 hosts the store" grep -q "hosting the rendezvous store" "$dir/err.1"
  fi
done
count() { cat "$dir"/out.* 2>/dev/null | grep -cE "$1" || true; }
at_least() { [[ $(count "$1") -ge $2 ]]; }
wait_until 20 "both workers report in round 0" at_least "world=2 .*generation=0" 2
sleep 1.5  # the heartbeats are renewing: the blip starts at a random point between two of them

ip -n "${tag}2" link set v2 down
sleep "$blip"
ip -n "${tag}2" link set v2 up
echo "host 2 was cut off for $blip s"
sleep 8  # longer than the liveness timeout (5 s): a lost node would have been noticed by now

for i in 1 2; do
  kill -0 "$(eval echo "\$agent$i")" 2>/dev/null || { fail "agent $i exited during the blip"; }
done
[[ $(count "generation=1") -eq 0 ]] || { fail "the job re-formed after a $blip s blip"; }
! grep -qE "was lost|lost the rendezvous store" "$dir"/err.* || { fail "a loss was reported"; }

: > "$until_file"
for a in "$agent1" "$agent2"; do
  wait_exit "$a" 20 "agent $a after the job's end"
  [[ $code -eq 0 ]] || { fail "agent $a exited $code"; }
done
echo "a $blip s blip was ridden out: no restart, no re-form, both agents exited 0"
