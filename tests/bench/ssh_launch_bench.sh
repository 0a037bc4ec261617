#!/usr/bin/env bash
# The launch over ssh side by side (docs/ssh.md, "Measured"): on two network-namespace hosts
# running sshd, (1) the wall time of a 2-host x 2-worker job that only prints its ranks, through
# `ddprun --hosts` and as two ddprun agents started by hand without ssh (the launch's own cost);
# (2) what is still running on the hosts 10 s after `kill -9` of the local command: torchrun 1.13
# started over plain ssh (ssh HOST torchrun ..., the homegrown way) vs `ddprun --hosts`.
#
#   tests/bench/ssh_launch_bench.sh build/launcher/ddprun [RUNS]     (root, ip netns, sshd)
set -uo pipefail
ddprun=$(realpath "$1")
runs=${2:-5}
root="$(cd "$(dirname "$0")/../.." && pwd)"
worker="$root/tests/cluster/ssh_worker.sh"
torchrun="/usr/bin/python3 $root/../shared/tools/torchrun-py311.py"
tag="sb$$"
subnet=10.242.0
source "$root/tests/netns/hosts.sh"
make_hosts 2
test_budget 900
ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$dir/user_key"
cp "$dir/user_key.pub" "$dir/authorized_keys"
chmod 600 "$dir/host_key" "$dir/user_key" "$dir/authorized_keys"
mkdir -p /run/sshd
for i in 1 2; do
  printf 'ListenAddress %s.%s\nHostKey %s/host_key\nAuthorizedKeysFile %s/authorized_keys\nUsePAM no\nStrictModes no\nPidFile none\n' \
    "$subnet" "$i" "$dir" "$dir" > "$dir/sshd_config.$i"
  ip netns exec "${tag}$i" /usr/sbin/sshd -D -f "$dir/sshd_config.$i" -E "$dir/sshd.$i.log" &
  pids+=($!)
done
sleep 1
opts="-i $dir/user_key -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o LogLevel=ERROR -o BatchMode=yes"
export DDPRUN_SSH_OPTIONS="$opts"
h1=$subnet.1
h2=$subnet.2
cd "$dir"
now() { date +%s.%N; }
elapsed() { awk "BEGIN{printf \"%.2f\", $2-$1}"; }

echo "== a 2-host x 2-worker job that prints its ranks: wall time, $runs runs =="
for ((run = 1; run <= runs; run++)); do
  t0=$(now)
  ip netns exec "${tag}1" "$ddprun" --hosts "$h1,$h2" --nproc-per-node 2 --no-python "$worker" m report \
    > /dev/null 2>&1 || echo "ddprun --hosts failed"
  t1=$(now)
  port=$((29500 + run))
  for i in 1 2; do
    ip netns exec "${tag}$i" "$ddprun" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
      --rdzv-endpoint "$h1:$port" --rdzv-id "b$run" --no-python "$worker" m report > /dev/null 2>&1 &
    eval "agent$i=$!"
  done
  wait "$agent1" "$agent2" || echo "an agent by hand failed"
  t2=$(now)
  echo "run $run: ddprun --hosts $(elapsed "$t0" "$t1") s | two ddprun agents by hand, no ssh $(elapsed "$t1" "$t2") s"
done

echo "== kill -9 of the local command 8 s after the start: what of the job runs on the hosts 10 s later =="
mark="tk$$"
for h in "$h1" "$h2"; do
  ip netns exec "${tag}1" ssh $opts "$h" "cd $dir && $torchrun --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint $h1:29700 --rdzv_id k1 --no_python $worker $mark wait $dir" \
    > /dev/null 2>&1 &
  clients+=($!)
done
sleep 8
kill -9 "${clients[@]}"
sleep 10
echo "torchrun 1.13 over plain ssh: $(pgrep -f "$mark" | wc -l) processes left:"
pgrep -af "$mark" | cut -c1-100
pkill -9 -f "$mark" || true
mark="dk$$"
ip netns exec "${tag}1" "$ddprun" --hosts "$h1,$h2" --nproc-per-node 2 --no-python "$worker" "$mark" wait "$dir" \
  > /dev/null 2>&1 &
driver=$!
sleep 8
echo "ddprun --hosts before the kill: $(pgrep -f "$mark" | wc -l) processes of the job"
kill -9 "$driver"
sleep 10
echo "ddprun --hosts: $(pgrep -f "$mark" | wc -l) processes left"
pkill -9 -f "$mark" || true
