#!/usr/bin/env bash
# A worker for ssh_hosts_test.sh: one line with what the launch gave it, then
#   ssh_worker.sh MARK report            exit 0
#   ssh_worker.sh MARK fail RANK CODE    rank RANK exits CODE, the others 0
#   ssh_worker.sh MARK wait DIR          stays (until stopped), its pids in DIR/pids.RANK
# MARK is only there to be found in ps (every process of the job carries it).
echo "rank=$RANK world=$WORLD_SIZE group_rank=$GROUP_RANK local_rank=$LOCAL_RANK" \
     "cvd=${CUDA_VISIBLE_DEVICES:-unset} forwarded=${SSH_TEST_FORWARDED:-unset}" \
     "nccl=${NCCL_TEST_SETTING:-unset} run_id=$TORCHELASTIC_RUN_ID cwd=$PWD" \
     "stdin=$(readlink /proc/self/fd/0)"
case "$2" in
  fail) [[ $RANK -eq $3 ]] && exit "$4" ;;
  wait)
    sleep 600 &
    echo "$$ $!" > "$3/pids.$RANK"
    echo "waiting"
    wait
    ;;
esac
exit 0
