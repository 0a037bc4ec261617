#!/bin/sh
# Worker for the rendezvous benchmark (bench_rendezvous.py): records when it started, as
# DIR/start.<nodes in its group>.<group rank>, then waits (at most 300 s) for DIR/stop and exits 0.
# The group's size tells a round of N nodes from the survivors' round of N - 1.
#   rendezvous_probe.sh DIR
dir=$1
date +%s.%N > "$dir/.start.$GROUP_WORLD_SIZE.$GROUP_RANK.$$"
mv "$dir/.start.$GROUP_WORLD_SIZE.$GROUP_RANK.$$" "$dir/start.$GROUP_WORLD_SIZE.$GROUP_RANK"
i=0
while [ ! -e "$dir/stop" ] && [ $i -lt 3000 ]; do
  sleep 0.1
  i=$((i + 1))
done
exit 0
