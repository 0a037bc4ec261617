#!/usr/bin/env bash
# A node cut off from the rendezvous store fences itself: its workers are gone before the others
# start a new group without it, and (elastic) it rejoins once the network heals. Two ddprun agents
# on two "hosts" (network namespaces joined by a bridge, hosts.sh); host 1 hosts the store. Host 2
# is cut by setting its bridge port down for PARTITION seconds: silence both ways, no FIN, no RST,
# no error on host 2's side (its own link stays up), as a switch port or a cable failing.
# Workers are tests/netns/ticker.sh: each writes when it started and, every 0.05 s, that it still
# runs, so "gone before" is read from the workers' own timestamps, never from log wording.
#
#   elastic: --nnodes 1:2 on c10d. Host 2's gen-0 worker's last tick comes before host 1's new
#            group's worker starts; after the heal host 2 rejoins (a new member, no restart spent)
#            and the job finishes on 2 nodes, both agents exiting 0.
#   fixed:   --nnodes 2:2 on c10d: the same, host 1 waiting for host 2 to come back (a job at
#            MIN = MAX takes its node back as it would take a replacement).
#   static:  --nnodes 2, static backend (node rank 0 hosts the store). No new group starts (a
#            static job cannot re-form without its node); host 2's worker is gone before host 1's
#            is stopped for the loss; both agents end with exit 1 and one clear line each.
#
# Prints the figures: partition start -> cut-off workers gone -> survivors' new group running ->
# rejoined.
#
#   partition_test.sh DDPRUN TICKER_SH PARTITION_SECONDS elastic|fixed|static   (77 = skipped)
set -euo pipefail
ddprun=$1
ticker=$2
partition=$3
mode=$4
tag="dp$$"
subnet=10.236.0
source "$(dirname "$0")/hosts.sh"
source "$(dirname "$0")/ticks.sh"
make_hosts 2
test_budget $((partition + 55))  # CTest's TIMEOUT is this plus a wide margin

port=29441
until_file="$dir/stop"
ticks="$dir/ticks"
mkdir -p "$ticks"
for i in 1 2; do
  if [[ $mode == elastic ]]; then
    rdzv=(--nnodes 1:2 --rdzv-backend c10d --rdzv-endpoint "${subnet}.1:$port" --rdzv-id partjob
          --rdzv-conf "last_call_timeout=1,join_timeout=60")
  elif [[ $mode == fixed ]]; then
    rdzv=(--nnodes 2:2 --rdzv-backend c10d --rdzv-endpoint "${subnet}.1:$port" --rdzv-id partjob
          --rdzv-conf "last_call_timeout=30,join_timeout=60")
  else
    rdzv=(--nnodes 2 --node-rank $((i - 1)) --master-addr "${subnet}.1" --master-port "$port"
          --rdzv-conf "last_call_timeout=3")
  fi
  ip netns exec "${tag}$i" env LOGLEVEL=INFO "$ddprun" "${rdzv[@]}" --nproc-per-node 1 \
    --no-python "$ticker" "$ticks" "h$i" "$until_file" > "$dir/out.$i" 2> "$dir/err.$i" &
  pids+=($!)
  eval "agent$i=$!"
  if [[ $i -eq 1 && $mode != static ]]; then
    wait_until 10 "agent 1 hosts the store" grep -q "hosting the rendezvous store" "$dir/err.1"
  fi
done


wait_until 30 "both hosts' workers run generation 0" eval 'started h1 0 && started h2 0'
wait_until 5 "host 2's worker ticks" ticking h2 0
old_pid=$(ls "$ticks"/start.h2.0.* | head -1); old_pid=${old_pid##*.}
sleep 1.5  # the heartbeats are renewing: the cut falls anywhere between two of them

cut=$(date +%s.%N)
ip -n "${tag}h" link set b2 down
echo "host 2 cut off (its bridge port down) for $partition s"
sleep "$partition"
ip -n "${tag}h" link set b2 up
healed=$(date +%s.%N)
echo "host 2's bridge port is up again after $(seconds "$healed" "$cut") s"

kill -0 "$old_pid" 2>/dev/null && fail "host 2's worker of generation 0 (pid $old_pid) still runs after the partition"
gone=$(last_tick h2 0)
echo "partition start -> host 2's workers gone (their last tick): $(seconds "$gone" "$cut") s"

if [[ $mode != static ]]; then
  # A fixed job's new group waits for host 2's return.
  wait_until $([[ $mode == fixed ]] && echo 40 || echo 15) "host 1 starts a new group" has_later h1 0
  gen1=$(later h1 0)
  survivors=$(first_start h1 "$gen1")
  echo "partition start -> survivors' new group running (host 1, generation $gen1): $(seconds "$survivors" "$cut") s"
  # The stale worker's last sign of life, plus one tick period, comes before the new group.
  before "$(python3 -c "import sys; print(float(sys.argv[1]) + 0.05)" "$gone")" "$survivors" ||
    fail "host 2's old worker ran until $gone, after host 1's new group started at $survivors"
  wait_until 40 "host 2 rejoins" has_later h2 0
  gen2=$(later h2 0)
  rejoined=$(first_start h2 "$gen2")
  echo "partition start -> host 2 rejoined (generation $gen2): $(seconds "$rejoined" "$cut") s ($(seconds "$rejoined" "$healed") s after the heal)"
  wait_until 15 "host 1 runs generation $gen2 with host 2" started h1 "$gen2"
  grep -q "world=2 .*generation=$gen2 " "$dir/out.1" || fail "generation $gen2 is not a world of 2"
  grep -q "rejoining the job as a new member" "$dir/err.2" || fail "host 2 does not say it rejoins"
  ! grep -q "hosting it exited" "$dir/err.2" || fail "host 2 says the store's host exited"
  grep -q "restart=0 " <(grep "generation=$gen2 " "$dir/out.2") || fail "the rejoin spent a restart"
  : > "$until_file"
  for a in "$agent1" "$agent2"; do
    wait_exit "$a" 20 "agent $a after the job's end"
    [[ $code -eq 0 ]] || fail "agent $a exited $code"
  done
  echo "host 2 rejoined after a $partition s partition; the job finished on 2 nodes, both agents exited 0"
else
  wait_exit "$agent2" 20 "the cut-off agent"
  [[ $code -eq 1 ]] || fail "the cut-off static agent exited $code, not 1"
  grep -q "the network to the rendezvous store at .* was cut: no answer for" "$dir/err.2" ||
    fail "no clear line on host 2"
  wait_exit "$agent1" 20 "host 1's agent"
  [[ $code -eq 1 ]] || fail "host 1's agent exited $code, not 1"
  grep -q "only 1 node(s) remain" "$dir/err.1" || fail "no clear line on host 1"
  ! compgen -G "$ticks/start.*.1.*" > /dev/null || fail "a new group started in a static job"
  h1_last=$(last_tick h1 0)
  before "$gone" "$h1_last" || fail "host 2's worker ran until $gone, after host 1's was stopped at $h1_last"
  echo "partition start -> host 1's worker stopped for the loss: $(seconds "$h1_last" "$cut") s"
  echo "static: host 2 fenced and ended with 1 ($(grep -o 'was cut: no answer for [0-9.]* s' "$dir/err.2")), host 1 ended with 1, no overlap"
fi
