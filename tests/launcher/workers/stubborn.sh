#!/bin/sh
# A worker that ignores SIGTERM and spawns grandchildren that do too, one of them in its own
# session (out of the worker's process group). Writes every pid it started to DIR/pids.<rank>,
# and DIR/term.<rank> when it receives SIGTERM.
#   stubborn.sh DIR [--exit-rank R]
# --exit-rank R: rank R exits 0 once its grandchildren run, leaving them behind.
dir=$1
exit_rank=-1
[ "${2:-}" = --exit-rank ] && exit_rank=$3
trap 'date +%s.%N > "$dir/term.$RANK"' TERM
sh -c 'trap "" TERM; sleep 300' &
echo $! >> "$dir/pids.$RANK"
setsid sh -c 'trap "" TERM; sleep 300' &
echo $! >> "$dir/pids.$RANK"
if [ "$RANK" = "$exit_rank" ]; then
  echo "rank $RANK ready, exiting"
  exit 0
fi
echo $$ >> "$dir/pids.$RANK"
echo "rank $RANK ready"
i=0
while [ $i -lt 3000 ]; do sleep 0.1; i=$((i + 1)); done  # 300 s, as long as its grandchildren
