#!/bin/sh
# A worker that ignores SIGTERM and spawns grandchildren that do too, one of them in its own
# session (out of the worker's process group). Writes every pid it started to DIR/pids.<rank>,
# and DIR/term.<rank> when it receives SIGTERM.
#   stubborn.sh DIR
dir=$1
trap 'date +%s.%N > "$dir/term.$RANK"' TERM
sh -c 'trap "" TERM; sleep 300' &
echo $! >> "$dir/pids.$RANK"
setsid sh -c 'trap "" TERM; sleep 300' &
echo $! >> "$dir/pids.$RANK"
echo $$ >> "$dir/pids.$RANK"
echo "rank $RANK ready"
while :; do sleep 0.1; done
