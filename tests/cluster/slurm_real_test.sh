#!/bin/bash
# A real one-node Slurm (Debian's slurm-wlm 22.05 and munge), started by this test in a private
# directory with its own ports, munge socket and key, and `srun ddprun` with no rendezvous flags
# on it (docs/slurm.md):
#   1. srun -N1 --ntasks-per-node=1 ddprun --nproc-per-node 2 W: exit 0, both ranks ran with
#      WORLD_SIZE 2 and the run id slurm-<job>.0 of the job srun made;
#   2. srun --ntasks-per-node=2 ddprun ...: both tasks exit 2 naming srun --ntasks-per-node=1;
#   3. sbatch with ddprun run directly in the batch script (no step): exit 2 naming srun.
#   4. The exit-code contract (docs/errors.md, "For schedulers"), as docs/slurm.md's recipe sets
#      it up: RequeueExit=81,82,83 in slurm.conf, `sbatch --requeue`, ddprun --exit-codes classes
#      handling SIGUSR1. A job stopped from outside by SIGUSR1 (what `--signal=USR1@120` sends
#      before the time limit) ends with 83 and Slurm requeues it; its second run
#      (SLURM_RESTART_COUNT 1) finishes, exit 0. A job whose worker raises the same ValueError
#      twice ends with 80 and is not requeued.
# Every daemon is stopped by its pid at the end, whatever happened. Skips (exit 77) with the
# reason where it cannot run: not root (slurmd starts tasks as their user), no Slurm or munge
# installed, or a daemon that does not start (munged, slurmctld, slurmd).
#
#   slurm_real_test.sh DDPRUN [PYTHON]
set -u
DDPRUN=$(realpath "$1")
PYTHON=${2:-/usr/bin/python3}
SKIP=77
skip() { echo "SKIP: $*"; exit $SKIP; }
fail() { echo "FAIL: $*"; show_logs; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (slurmd runs as root to start tasks); run as root"
for tool in munged munge slurmctld slurmd srun sbatch sinfo scancel; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps.sh installs slurm-wlm and munge)"
done

T=$(mktemp -d /tmp/ddprun-slurm-real-XXXXXX) || fail "mktemp"
chmod 700 "$T"
PIDS=()
show_logs() {
  for f in "$T"/munge/munged.log "$T"/ctld.log "$T"/d.log "$T"/ctld.out "$T"/d.out; do
    [ -s "$f" ] && { echo "--- $f (last 15 lines) ---"; tail -n 15 "$f"; }
  done
}
teardown() {
  # Jobs first (their steps end with them), then the daemons, each by its pid, each wait bounded.
  [ -n "${SLURM_CONF:-}" ] && timeout 10 scancel --quiet --full -u root >/dev/null 2>&1
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$T"
}
trap teardown EXIT

# munge: its own key and socket.
mkdir -m 700 "$T/munge"
head -c 1024 /dev/urandom > "$T/munge/munge.key" && chmod 600 "$T/munge/munge.key"
munged -f --socket="$T/munge/munge.sock" --key-file="$T/munge/munge.key" \
  --pid-file="$T/munge/munged.pid" --log-file="$T/munge/munged.log" \
  --seed-file="$T/munge/munged.seed" || skip "munged does not start: $(tail -n 3 "$T/munge/munged.log" 2>/dev/null)"
for _ in $(seq 50); do [ -s "$T/munge/munged.pid" ] && break; sleep 0.1; done
[ -s "$T/munge/munged.pid" ] && PIDS+=("$(cat "$T/munge/munged.pid")")
munge -n -S "$T/munge/munge.sock" | unmunge -S "$T/munge/munge.sock" >/dev/null 2>&1 ||
  skip "munge does not work here: $(tail -n 3 "$T/munge/munged.log")"

# The node: this host's short name when it resolves (it is what SLURM_STEP_NODELIST then holds),
# else localhost; its address 127.0.0.1 either way.
NODE=$(hostname -s)
getent hosts "$NODE" >/dev/null || NODE=localhost
read -r CTLD_PORT SLURMD_PORT < <("$PYTHON" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
mkdir -p "$T/ctld" "$T/d"
: > "$T/plugstack.conf"
cat > "$T/slurm.conf" <<CONF
ClusterName=ddprunslurmtest
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.sock,cred_expire=15
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$T/ctld
SlurmdSpoolDir=$T/d
SlurmctldPidFile=$T/ctld.pid
SlurmdPidFile=$T/d.pid
SlurmctldLogFile=$T/ctld.log
SlurmdLogFile=$T/d.log
PlugStackConfig=$T/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobRequeue=1
RequeueExit=81,82,83
SchedulerParameters=sched_interval=1
SwitchType=switch/none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 RealMemory=500 State=UNKNOWN
PartitionName=ddprun Nodes=$NODE Default=YES MaxTime=10 State=UP
CONF
export SLURM_CONF="$T/slurm.conf"
# Nothing of an outer Slurm job may leak into the one made here.
for v in $(env | grep -o '^SLURM[A-Z_]*' | grep -v '^SLURM_CONF$'); do unset "$v"; done
unset DDPRUN_SLURM_PORT

slurmctld -D -i -f "$SLURM_CONF" > "$T/ctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" -N "$NODE" > "$T/d.out" 2>&1 &
PIDS+=($!)
state=""
for _ in $(seq 60); do
  state=$(timeout 5 sinfo -h -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  for pid in "${PIDS[@]:1}"; do kill -0 "$pid" 2>/dev/null || skip "a Slurm daemon exited at start: $(show_logs)"; done
  sleep 0.5
done
[ "$state" = idle ] || skip "the Slurm node is not idle after 30 s (state '$state'): $(show_logs)"
echo "Slurm up: node $NODE idle, slurmctld on 127.0.0.1:$CTLD_PORT"

# 1. srun ddprun, no rendezvous flags.
cat > "$T/worker.py" <<'PY'
import os
print("worker", os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["TORCHELASTIC_RUN_ID"],
      os.environ["SLURM_JOB_ID"], flush=True)
PY
cd "$T" || fail "cd $T"
out=$(PYTHON_EXEC="$PYTHON" timeout 60 srun -N1 --ntasks-per-node=1 "$DDPRUN" --nproc-per-node 2 "$T/worker.py" 2>"$T/srun1.err")
code=$?
[ $code = 0 ] || fail "srun ddprun exited $code: $out $(cat "$T/srun1.err")"
job=$(echo "$out" | awk '/worker 0 /{print $5}')
[ -n "$job" ] || fail "rank 0 did not run: $out"
for rank in 0 1; do
  echo "$out" | grep -qx "\[default$rank\]:worker $rank 2 slurm-$job.0 $job" ||
    fail "rank $rank did not run with WORLD_SIZE 2 and run id slurm-$job.0: $out"
done
grep -q "^ddprun: note: Slurm step $job.0: node 0 of 1, store on $NODE:" "$T/srun1.err" ||
  fail "no Slurm line: $(cat "$T/srun1.err")"
echo "srun ddprun: ranks 0 and 1, WORLD_SIZE 2, run id slurm-$job.0; $(grep '^ddprun: note: Slurm' "$T/srun1.err")"

# 2. Two tasks on the node.
PYTHON_EXEC="$PYTHON" timeout 60 srun -N1 --ntasks-per-node=2 "$DDPRUN" --nproc-per-node 1 "$T/worker.py" >"$T/srun2.out" 2>&1
code=$?
[ $code = 2 ] || fail "two tasks per node: srun exited $code, expected 2: $(cat "$T/srun2.out")"
[ "$(grep -c 'more than one task on a node.*srun --ntasks-per-node=1 ddprun' "$T/srun2.out")" = 2 ] ||
  fail "two tasks per node: expected the error from both tasks: $(cat "$T/srun2.out")"
grep -q '\[default' "$T/srun2.out" && fail "two tasks per node: a worker ran: $(cat "$T/srun2.out")"
echo "two tasks per node: both exit 2: $(grep -m1 'ddprun: error' "$T/srun2.out")"

# 3. ddprun directly in the batch script.
cat > "$T/batch.sh" <<SH
#!/bin/bash
PYTHON_EXEC="$PYTHON" "$DDPRUN" --nproc-per-node 2 "$T/worker.py"
echo "ddprun exit \$?"
SH
timeout 10 sbatch -N1 -o "$T/batch.out" "$T/batch.sh" >/dev/null || fail "sbatch failed"
for _ in $(seq 60); do grep -q "ddprun exit" "$T/batch.out" 2>/dev/null && break; sleep 0.5; done
grep -q "ddprun exit 2" "$T/batch.out" || fail "in the batch script: $(cat "$T/batch.out" 2>/dev/null)"
grep -q "outside a job step (SLURM_STEP_ID is not set.*srun --ntasks-per-node=1 ddprun" "$T/batch.out" ||
  fail "in the batch script, the error does not explain: $(cat "$T/batch.out")"
grep -q "worker" "$T/batch.out" && fail "in the batch script a worker ran: $(cat "$T/batch.out")"
echo "batch script: $(grep 'ddprun: error' "$T/batch.out")"
# 4. Requeue on ddprun's class codes. A requeued job is eligible again after the credential's
# lifetime (cred_expire, 15 s here; Slurm's default is 120 s), then the next scheduling pass.
job_state() { timeout 5 scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*\|Restarts=[0-9]*\|ExitCode=[0-9:]*' | tr '\n' ' '; }
wait_state() {  # JOB PATTERN SECONDS: until scontrol's line matches, else fail showing it
  local line=""
  for _ in $(seq $(($3 * 2))); do
    line=$(job_state "$1")
    echo "$line" | grep -q "$2" && return 0
    sleep 0.5
  done
  fail "job $1 not '$2' after $3 s: '$line'; its output: $(tail -n 20 "$T"/requeue.out "$T"/bug.out 2>/dev/null)"
}
cat > "$T/drained.py" <<'PY'
import os, sys, time
run = os.environ.get("SLURM_RESTART_COUNT", "0")
print("worker", os.environ["RANK"], "run", run, flush=True)
if run == "0":
    time.sleep(120)  # until the drain's signal
PY
cat > "$T/requeue.sh" <<SH
#!/bin/bash
PYTHON_EXEC="$PYTHON" srun --ntasks-per-node=1 "$DDPRUN" --exit-codes classes \\
  --signals-to-handle SIGTERM,SIGINT,SIGUSR1 --nproc-per-node 2 "$T/drained.py"
code=\$?
echo "ddprun exit \$code restart \${SLURM_RESTART_COUNT:-0}"
exit \$code
SH
job=$(timeout 10 sbatch --parsable --requeue -N1 -o "$T/requeue.out" --open-mode=append "$T/requeue.sh") ||
  fail "sbatch --requeue failed"
for _ in $(seq 120); do grep -q "worker 1 run 0" "$T/requeue.out" 2>/dev/null && break; sleep 0.5; done
grep -q "worker 1 run 0" "$T/requeue.out" || fail "the requeue job's workers did not start: $(cat "$T/requeue.out" 2>/dev/null)"
timeout 10 scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job failed"
wait_state "$job" "JobState=COMPLETED" 100
grep -q "ddprun exit 83 restart 0" "$T/requeue.out" ||
  fail "the stopped run did not end with 83: $(cat "$T/requeue.out")"
grep -q "ddprun exit 0 restart 1" "$T/requeue.out" && job_state "$job" | grep -q "Restarts=1" ||
  fail "not requeued once, then finished: $(job_state "$job"): $(cat "$T/requeue.out")"
echo "stopped by SIGUSR1: ddprun exit 83, Slurm requeued the job, its second run exit 0 ($(job_state "$job"))"

cat > "$T/bug.py" <<'PY'
raise ValueError("a bug of the user's")
PY
cat > "$T/bug.sh" <<SH
#!/bin/bash
PYTHON_EXEC="$PYTHON" srun --ntasks-per-node=1 "$DDPRUN" --exit-codes classes --max-restarts 3 \\
  --nproc-per-node 1 "$T/bug.py"
code=\$?
echo "ddprun exit \$code restart \${SLURM_RESTART_COUNT:-0}"
exit \$code
SH
job=$(timeout 10 sbatch --parsable --requeue -N1 -o "$T/bug.out" "$T/bug.sh") || fail "sbatch --requeue failed"
wait_state "$job" "JobState=FAILED" 100
grep -q "ddprun exit 80 restart 0" "$T/bug.out" && job_state "$job" | grep -q "Restarts=0" ||
  fail "a user's bug: not exit 80 without a requeue: $(job_state "$job"): $(cat "$T/bug.out")"
echo "the same ValueError twice: ddprun exit 80, not requeued ($(job_state "$job"))"
echo "PASS"
