#!/bin/sh
# A worker that reports who it is (one line), optionally fails or lingers, then exits.
#   report.sh [--exit CODE] [--fail-rank R] [--fail-restart N] [--sleep S] [--touch DIR]
# --fail-rank R: only rank R fails (with --exit CODE, default 1), and only while
#   TORCHELASTIC_RESTART_COUNT is --fail-restart (default: on every restart).
# --touch DIR: creates DIR/ran.<generation>.<rank> (to count runs).
# --progress: touches $DDPRUN_HEARTBEAT_FILE first (the round made progress: a failure after it
#   is not "the same failure again without progress", which the restart policy stops at once).
# --until FILE: keeps running until FILE exists (a job the test ends when it wants), at most
#   120 s (then it exits 3).
code=1 fail_rank=-1 fail_restart=any sleep_for=0 touch_dir= until= progress=
while [ $# -gt 0 ]; do
  case $1 in
    --exit) code=$2; shift 2 ;;
    --fail-rank) fail_rank=$2; shift 2 ;;
    --fail-restart) fail_restart=$2; shift 2 ;;
    --sleep) sleep_for=$2; shift 2 ;;
    --touch) touch_dir=$2; shift 2 ;;
    --until) until=$2; shift 2 ;;
    --progress) progress=1; shift ;;
    *) shift ;;
  esac
done
echo "rank=$RANK local_rank=$LOCAL_RANK world=$WORLD_SIZE group_rank=$GROUP_RANK group_world=$GROUP_WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT generation=$DDPRUN_GENERATION master=$MASTER_ADDR:$MASTER_PORT"
[ -n "$touch_dir" ] && : > "$touch_dir/ran.$DDPRUN_GENERATION.$RANK"
[ -n "$progress" ] && touch "$DDPRUN_HEARTBEAT_FILE"
[ "$sleep_for" != 0 ] && sleep "$sleep_for"
if [ -n "$until" ]; then
  # Bounded, so that a test that never gives the file leaves no worker behind for long.
  waited=0
  while [ ! -e "$until" ]; do
    if [ $waited -ge 2400 ]; then echo "rank $RANK: no $until after 120 s, giving up" >&2; exit 3; fi
    sleep 0.05
    waited=$((waited + 1))
  done
fi
if [ "$RANK" = "$fail_rank" ] && { [ "$fail_restart" = any ] || [ "$fail_restart" = "$TORCHELASTIC_RESTART_COUNT" ]; }; then
  echo "rank $RANK failing with $code" >&2
  if [ "$code" = SIGKILL ]; then kill -9 $$; fi
  exit "$code"
fi
exit 0
