#!/bin/sh
# A worker for the partition tests that leaves its own evidence of when it ran: it writes the time
# it started to DIR/start.HOST.<generation>.<pid> and then, every 0.05 s, the time it is still
# running to DIR/tick.HOST.<generation>.<pid> (replaced whole each time), until UNTIL exists; then
# it exits 0. The last tick of a killed worker is when it last ran (SIGKILL leaves no other trace).
# Also prints the report line the other tests read ("rank=... world=... generation=...").
#   ticker.sh DIR HOST UNTIL
dir=$1 host=$2 until=$3
gen=$DDPRUN_GENERATION
now() { date +%s.%N; }
now > "$dir/start.$host.$gen.$$"
echo "rank=$RANK world=$WORLD_SIZE group_rank=$GROUP_RANK restart=$TORCHELASTIC_RESTART_COUNT generation=$gen pid=$$ host=$host"
tick=0
while [ ! -e "$until" ]; do
  now > "$dir/.tick.$host.$gen.$$" && mv -f "$dir/.tick.$host.$gen.$$" "$dir/tick.$host.$gen.$$"
  # Bounded: a test that never gives the file leaves no worker behind for long (180 s).
  tick=$((tick + 1))
  if [ $tick -ge 3600 ]; then echo "$host: no $until after 180 s, giving up" >&2; exit 3; fi
  sleep 0.05
done
exit 0
