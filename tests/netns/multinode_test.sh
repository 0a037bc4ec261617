#!/usr/bin/env bash
# Three ddprun agents on three "hosts" (network namespaces with their own addresses, joined by a
# bridge) form one elastic job (--nnodes 2:3). Then one host's network is cut (no FIN, no RST:
# only the store's hold time-to-live can tell) and the other two must re-form within seconds,
# while the cut-off agent fences its workers and tries to rejoin. A fourth host joins late and the
# job re-forms with three nodes again; then one agent is killed and the other two re-form. Last, a
# 2-host job whose endpoint name resolves to loopback on the host that serves it.
#
#   multinode_test.sh DDPRUN REPORT_SH     (exit 77 = skipped: needs root and `ip netns`)
set -euo pipefail
ddprun=$1
report=$2
tag="dm$$"
subnet=10.233.0
source "$(dirname "$0")/hosts.sh"
make_hosts 4
test_budget 60  # half of CTest's 120 s: a wait that gives up has time to say what it saw

port=29412
until_file="$dir/stop"
start_agent() {  # start_agent N
  ip netns exec "${tag}$1" env LOGLEVEL=INFO "$ddprun" --nnodes 2:3 --nproc-per-node 2 \
    --rdzv-backend c10d --rdzv-endpoint "10.233.0.1:$port" --rdzv-id netjob \
    --rdzv-conf last_call_timeout=1,join_timeout=30 \
    --no-python "$report" --until "$until_file" > "$dir/out.$1" 2> "$dir/err.$1" &
  pids+=($!)
  eval "agent$1=$!"
}
count() { cat "$dir"/out.* 2>/dev/null | grep -cE "$1" || true; }
at_least() { [[ $(count "$1") -ge $2 ]]; }
wait_for() {  # wait_for SECONDS PATTERN N
  wait_until "$1" "$3 worker lines match '$2'" at_least "$2" "$3"
}

start_agent 1
wait_until 10 "agent 1 hosts the store" grep -q "hosting the rendezvous store" "$dir/err.1"
start_agent 2
start_agent 3
wait_for 30 "world=6 .*generation=0" 6
# Group rank 0 (the lowest address) hosts the workers' store; every worker points there.
[[ $(count "group_world=3 .*generation=0 master=10\.233\.0\.1:") -eq 6 ]] || fail "MASTER_ADDR"
for i in 1 2 3; do
  grep -q "group_rank=$((i - 1)) " "$dir/out.$i" || fail "node $i is not group rank $((i - 1))"
done
echo "3 hosts formed one job: world 6, MASTER_ADDR 10.233.0.1"

# Cut host 3 off the network: nothing tells the others but its lapsing hold.
ip -n "${tag}3" link set v3 down
cut=$SECONDS
wait_for 15 "world=4 .*generation=1" 4
echo "hosts 1 and 2 re-formed $((SECONDS - cut)) s after host 3 was cut off"
# The cut-off agent fenced itself (its workers are gone) and, the job being elastic, keeps trying
# to rejoin (tests/netns/partition_test.sh heals the network and sees it come back); here its
# network stays cut, so it is stopped by hand.
wait_until 10 "host 3 fences its workers" grep -q "stopping this node's workers of round 0 now" "$dir/err.3"
wait_until 10 "host 3 tries to rejoin" grep -q "rejoining the job as a new member" "$dir/err.3"
kill -TERM "$agent3"
wait_exit "$agent3" 15 "the cut-off agent"
[[ $code -eq 143 ]] || fail "the cut-off agent exited $code on SIGTERM while rejoining"
echo "host 3's agent fenced its workers and was rejoining until stopped: $(grep -o 'no liveness renewal[^(]*' "$dir/err.3" | head -1)"

# Host 4 arrives late: the job grows back to 3 nodes.
start_agent 4
wait_for 30 "world=6 .*generation=2" 6
echo "host 4 joined: world 6 again"

# Host 2's agent is killed outright: its connection drops and hosts 1 and 4 re-form at once.
kill -9 "$agent2"
killed=$SECONDS
wait_for 10 "world=4 .*generation=3" 4
echo "hosts 1 and 4 re-formed $((SECONDS - killed)) s after host 2's agent was killed"

: > "$until_file"
for a in "$agent1" "$agent4"; do
  wait_exit "$a" 20 "agent $a after the job's end"
  [[ $code -eq 0 ]] || fail "agent $a exited $code"
done
echo "job finished: every remaining agent exited 0"

# The endpoint is a host name that its own host resolves to loopback (Debian's "127.0.1.1
# <hostname>" line) while the other host resolves it to the real address: the agent hosting the
# store must still be reachable. `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts.
name="ddprun-test-$tag"
for i in 1 2; do mkdir -p "/etc/netns/${tag}$i"; done
cleanup_etc() { rm -rf "/etc/netns/${tag}1" "/etc/netns/${tag}2"; delete_hosts; }
trap cleanup_etc EXIT
echo "127.0.1.1 $name" > "/etc/netns/${tag}1/hosts"
echo "10.233.0.1 $name" > "/etc/netns/${tag}2/hosts"
for i in 1 2; do
  ip netns exec "${tag}$i" env LOGLEVEL=INFO "$ddprun" --nnodes 2 --nproc-per-node 2 \
    --rdzv-backend c10d --rdzv-endpoint "$name:$((port + 1))" --rdzv-id namejob \
    --rdzv-conf read_timeout=20 --no-python "$report" > "$dir/name.out.$i" 2> "$dir/name.err.$i" &
  pids+=($!)
  eval "named$i=$!"
  if [[ $i -eq 1 ]]; then
    wait_until 10 "the named endpoint's host hosts the store" \
      grep -q "hosting the rendezvous store" "$dir/name.err.1"
  fi
done
for a in "$named1" "$named2"; do
  wait_exit "$a" 20 "agent $a of the named endpoint"
  [[ $code -eq 0 ]] || fail "agent $a of the named endpoint exited $code"
done
[[ $(cat "$dir"/name.out.* | grep -c "world=4 ") -eq 4 ]] || fail "no world of 4"
grep -q "listening on all interfaces" "$dir/name.err.1" || fail "no notice"
echo "an endpoint name that is loopback on its own host still forms a 2-host job"
