#!/bin/sh
# Worker for the restart benchmark. In the first attempt the last rank dies after a moment,
# recording when (DIR/death), and the others wait to be stopped. Every worker of a later attempt
# records when it started (DIR/start.1.<rank>) and exits 0. (The death file, not
# TORCHELASTIC_RESTART_COUNT, tells attempts apart: torchrun counts restarts per node.)
#   restart_probe.sh DIR
dir=$1
if [ -e "$dir/death" ]; then
  date +%s.%N > "$dir/start.1.$RANK"
  exit 0
fi
if [ "$RANK" = $((WORLD_SIZE - 1)) ]; then
  sleep 1
  # Stamped as close to the death as a shell can: no `mv` (a fork and exec, 1-2 ms here) between
  # the stamp and the kill. Nothing reads the file before the new attempt starts.
  date +%s.%N > "$dir/death"
  kill -9 $$
fi
exec sleep 60
