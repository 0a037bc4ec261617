#!/usr/bin/env bash
# A node cut off from etcd fences itself and rejoins after healing (#20, points 4, 5 and point 8's
# partition test), or rides a short blip out. Three ddprun agents of one elastic job (--nnodes 1:3,
# --rdzv-backend etcd) on three "hosts" (network namespaces joined by a bridge, hosts.sh), over a
# real 3-member etcd (Debian's etcd-server) that runs in the bridge's own namespace, one member
# on each of three addresses on br0: every host reaches every member through its bridge port, and
# a host whose port is down loses all of etcd and the other hosts at once, while etcd's quorum
# and the other hosts stay whole (the cut is the node's, not etcd's).
#
# Host 1 is cut: it has the lowest address, so it is group rank 0 and hosts the round's workers'
# store; on c10d its loss would end the job with the store, on etcd the survivors re-form around
# a new host. The cut is its bridge port set down: silence both ways, no FIN, no RST, no error on
# host 1's side (its own link stays up), as a switch port or a cable failing.
# Workers are tests/netns/ticker.sh: each writes when it started and, every 0.05 s, that it still
# runs, so "gone before" is read from the workers' own timestamps, never from log wording.
#
#   partition: host 1 cut for SECONDS (8). Its workers' last tick comes before the survivors'
#              (hosts 2, 3) new group's first start: on etcd the survivors hear of the loss only
#              when etcd expires host 1's lease (TTL 5 s) and deletes its alive key, and their
#              LapseReporter writes the node_lost notice; host 1 fences at 4.5 s without an
#              acknowledged renewal. After the heal host 1 rejoins (a new member, no restart
#              spent) and the job finishes on 3 nodes, every agent exiting 0.
#   blip:      host 1 cut for SECONDS (2), shorter than the fence: no re-form, no restart, no
#              loss reported, and the job finishes on 3 nodes, every agent exiting 0.
#
# Prints the figures: partition start -> cut-off workers gone -> survivors' new group running ->
# rejoined.
#
#   partition_etcd_test.sh DDPRUN TICKER_SH SECONDS partition|blip    (77 = skipped)
set -euo pipefail
ddprun=$1
ticker=$2
seconds_cut=$3
mode=$4
etcd=/usr/bin/etcd
etcdctl=/usr/bin/etcdctl
if [[ ! -x $etcd || ! -x $etcdctl ]]; then
  echo "skipped: needs Debian's etcd-server and etcd-client (scripts/install-deps.sh installs them)"
  exit 77
fi
tag="de$$"
subnet=10.237.0
source "$(dirname "$0")/hosts.sh"
source "$(dirname "$0")/ticks.sh"
# etcd fsyncs every commit: its data in /dev/shm, removed with the rest.
etcd_data=$(mktemp -d /dev/shm/ddprun-netns-etcd.XXXXXX)
trap 'delete_hosts; rm -rf "$etcd_data"' EXIT
make_hosts 3
test_budget $((seconds_cut + 60))  # CTest's TIMEOUT is this plus a wide margin

# etcd: three members in the bridge's namespace, member m on ${subnet}.10m of br0.
ip -n "${tag}h" link set lo up
cluster=
for m in 1 2 3; do
  ip -n "${tag}h" addr add "${subnet}.10$m/24" dev br0
  cluster+="${cluster:+,}e$m=http://${subnet}.10$m:2380"
done
endpoints=
for m in 1 2 3; do
  ip netns exec "${tag}h" "$etcd" --name "e$m" --data-dir "$etcd_data/e$m" \
    --listen-client-urls "http://${subnet}.10$m:2379" --advertise-client-urls "http://${subnet}.10$m:2379" \
    --listen-peer-urls "http://${subnet}.10$m:2380" --initial-advertise-peer-urls "http://${subnet}.10$m:2380" \
    --initial-cluster "$cluster" --initial-cluster-token "$tag" --initial-cluster-state new \
    --logger zap --log-outputs stderr > "$dir/etcd.$m.log" 2>&1 &
  pids+=($!)
  endpoints+="${endpoints:+,}${subnet}.10$m:2379"
done
for i in 1 2 3; do logs+=("$dir/out.$i" "$dir/err.$i"); done
healthy() {
  ip netns exec "${tag}2" "$etcdctl" --endpoints "$endpoints" --dial-timeout 1s --command-timeout 2s \
    endpoint health > /dev/null 2>&1
}
wait_until 30 "etcd's 3 members are healthy, seen from host 2" healthy

until_file="$dir/stop"
ticks="$dir/ticks"
mkdir -p "$ticks"
for i in 1 2 3; do
  ip netns exec "${tag}$i" env LOGLEVEL=INFO "$ddprun" --nnodes 1:3 --nproc-per-node 1 \
    --rdzv-backend etcd --rdzv-endpoint "$endpoints" --rdzv-id partjob \
    --rdzv-conf "last_call_timeout=2,join_timeout=60" \
    --no-python "$ticker" "$ticks" "h$i" "$until_file" > "$dir/out.$i" 2> "$dir/err.$i" &
  pids+=($!)
  eval "agent$i=$!"
done

# newest HOST: the highest generation HOST started a worker in (-1 if none).
newest() {
  local f g best=-1
  for f in "$ticks"/start."$1".*; do
    [[ -e $f ]] || continue
    g=${f#"$ticks/start.$1."}; g=${g%%.*}
    ((g > best)) && best=$g
  done
  echo "$best"
}
# all_in GEN: every host's worker of generation GEN started.
all_in() { started h1 "$1" && started h2 "$1" && started h3 "$1"; }
# together: the three hosts run one generation (the agents may have formed a smaller round
# first, when one started late on a busy machine: then the job re-formed with the third).
together() { local g; g=$(newest h1); ((g >= 0)) && all_in "$g" && [[ $(newest h2) == "$g" && $(newest h3) == "$g" ]]; }
world_of() { grep -h "generation=$1 " "$dir"/out.* | grep -o 'world=[0-9]*' | sort -u | tr '\n' ' '; }

wait_until 40 "the three hosts' workers run one generation" together
gen0=$(newest h1)
wait_until 5 "host 1's worker ticks" ticking h1 "$gen0"
[[ $(world_of "$gen0") == "world=3 " ]] || fail "generation $gen0 is not a world of 3: $(world_of "$gen0")"
old_pid=$(ls "$ticks"/start.h1."$gen0".* | head -1); old_pid=${old_pid##*.}
# What the running job asks of etcd (informational, not checked): each member's count of the
# requests started, summed, over the wait before the cut.
etcd_requests() {
  ip netns exec "${tag}h" python3 - "$endpoints" <<'PY'
import re, sys, time, urllib.request
counts = {"Watch": 0, "Txn": 0, "LeaseKeepAlive": 0, "Range": 0, "Put": 0}
for member in sys.argv[1].split(","):
    text = urllib.request.urlopen(f"http://{member}/metrics", timeout=2).read().decode()
    for method, n in re.findall(r'^grpc_server_started_total\{grpc_method="(\w+)".* (\d+)$', text, re.M):
        if method in counts:
            counts[method] += int(n)
print(time.time(), *(counts[k] for k in sorted(counts)))
PY
}
load_before=$(etcd_requests 2>/dev/null || true)
sleep 1.5  # the keep-alives are renewing: the cut falls anywhere between two of them
load_after=$(etcd_requests 2>/dev/null || true)
if [[ -n $load_before && -n $load_after ]]; then
  python3 -c '
import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
dt = float(b[0]) - float(a[0])
names = ["keep-alives", "puts", "ranges", "txns", "watches"]  # sorted by etcd method name
print("etcd requests per second per agent while the job runs: " + ", ".join(
    f"{(int(y) - int(x)) / dt / 3:.1f} {n}" for n, x, y in zip(names, a[1:], b[1:])))' "$load_before" "$load_after"
fi
[[ $(newest h1) == "$gen0" ]] || fail "the job re-formed before the cut (generation $(newest h1))"
echo "the job runs generation $gen0 on 3 hosts over etcd at $endpoints"

cut=$(date +%s.%N)
ip -n "${tag}h" link set b1 down
echo "host 1 cut off (its bridge port down) for $seconds_cut s"
sleep "$seconds_cut"
ip -n "${tag}h" link set b1 up
healed=$(date +%s.%N)
echo "host 1's bridge port is up again after $(seconds "$healed" "$cut") s"

if [[ $mode == blip ]]; then
  sleep 8  # longer than the lease's TTL (5 s): a lost node would have been noticed by now
  for i in 1 2 3; do
    kill -0 "$(eval echo "\$agent$i")" 2>/dev/null || fail "agent $i exited after the blip"
  done
  for h in h1 h2 h3; do
    ! has_later "$h" "$gen0" || fail "$h started generation $(later "$h" "$gen0") after a $seconds_cut s blip"
  done
  kill -0 "$old_pid" 2>/dev/null || fail "host 1's worker (pid $old_pid) is gone after a $seconds_cut s blip"
  ! grep -qE "was lost|stopping this node's workers|lost the rendezvous store|rejoining" "$dir"/err.* ||
    fail "a loss or a fence was reported"
  : > "$until_file"
  for a in "$agent1" "$agent2" "$agent3"; do
    wait_exit "$a" 20 "agent $a after the job's end"
    [[ $code -eq 0 ]] || fail "agent $a exited $code"
  done
  echo "a $seconds_cut s cut was ridden out on etcd: no re-form, no restart, every agent exited 0"
  exit 0
fi

kill -0 "$old_pid" 2>/dev/null && fail "host 1's worker of generation $gen0 (pid $old_pid) still runs after the partition"
gone=$(last_tick h1 "$gen0")
echo "partition start -> host 1's workers gone (their last tick): $(seconds "$gone" "$cut") s"

wait_until 15 "hosts 2 and 3 start a new group" eval 'has_later h2 "$gen0" && has_later h3 "$gen0"'
gen1=$(later h2 "$gen0")
[[ $(later h3 "$gen0") == "$gen1" ]] || fail "hosts 2 and 3 started different generations"
survivors=$(first_start h2 "$gen1")
other=$(first_start h3 "$gen1")
before "$other" "$survivors" && survivors=$other
echo "partition start -> survivors' new group running (hosts 2, 3, generation $gen1): $(seconds "$survivors" "$cut") s"
# The stale worker's last sign of life, plus one tick period, comes before the new group.
before "$(python3 -c "import sys; print(float(sys.argv[1]) + 0.05)" "$gone")" "$survivors" ||
  fail "host 1's old worker ran until $gone, after the survivors' new group started at $survivors"
! started h1 "$gen1" || fail "host 1 ran a worker in the survivors' generation $gen1"
[[ $(world_of "$gen1") == "world=2 " ]] || fail "the survivors' generation $gen1 is not a world of 2: $(world_of "$gen1")"
grep -q "was lost; stopping this round" "$dir/err.2" || fail "host 2 does not say a node was lost"

wait_until 40 "host 1 rejoins" has_later h1 "$gen0"
gen2=$(later h1 "$gen0")
rejoined=$(first_start h1 "$gen2")
echo "partition start -> host 1 rejoined (generation $gen2): $(seconds "$rejoined" "$cut") s ($(seconds "$rejoined" "$healed") s after the heal)"
wait_until 15 "hosts 2 and 3 run generation $gen2 with host 1" eval 'started h2 "$gen2" && started h3 "$gen2"'
[[ $(world_of "$gen2") == "world=3 " ]] || fail "generation $gen2 is not a world of 3: $(world_of "$gen2")"
grep -q "rejoining the job as a new member" "$dir/err.1" || fail "host 1 does not say it rejoins"
grep -q "restart=0 " <(grep "generation=$gen2 " "$dir/out.1") || fail "the rejoin spent a restart"
: > "$until_file"
for a in "$agent1" "$agent2" "$agent3"; do
  wait_exit "$a" 20 "agent $a after the job's end"
  [[ $code -eq 0 ]] || fail "agent $a exited $code"
done
echo "host 1 rejoined after a $seconds_cut s partition; the job finished on 3 nodes over etcd, every agent exited 0"
