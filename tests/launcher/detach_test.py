#!/usr/bin/env python3
"""A process a worker keeps after the job on purpose (issue #19, point 6): `ddprun detach`.

    detach_test.py --ddprun BIN --scenario NAME [--torchrun-python PY]

  kept    a worker starts an "uploader" with `ddprun detach -- sh -c ...` and exits 0 at once
          (1 worker, which shares the agent's descriptors, and 2, which write through pipes):
          ddprun exits 0 while the uploader still runs (it does not wait for it), the uploader
          then finishes its upload; it is in a session of its own, out of the worker cgroup
          where there is one, with DDPRUN_DETACHED=<the worker's DDPRUN_AGENT> and no
          DDPRUN_AGENT; a sibling started with plain `setsid` is killed as before. The same
          when the agent is killed with SIGKILL mid-job: its guardian kills the sibling, never
          the uploader
  nohup   the same uploader started the way one does under torchrun, `nohup sh -c ... &` (and
          with setsid too): killed under ddprun (no orphans), finished under torchrun 1.13 side
          by side, where the `ddprun detach` one finishes as well (the script runs under both)

The uploader waits for a "go" file from the test before it writes its result, so what is checked
while it runs does not depend on the machine's speed; every wait is bounded and prints what it
saw. Every process the test started carries a token of its own in its environment and is killed
on the way out.
"""
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from side_by_side import TORCHRUN, fail, scenario_main, shown, torchrun_command  # noqa: E402
import side_by_side  # noqa: E402
TOKEN = "DETACH_TEST_TOKEN"

# The uploader, `sh -c UPLOADER WORK NAME`: its pid, then (after the test's "go", at most 30 s)
# its result. $0 is WORK and $1 the uploader's name.
UPLOADER = ('echo $$ > "$0/$1.pid"; i=0; '
            'while [ ! -e "$0/go" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; '
            'echo uploaded > "$0/$1.done"')

# The worker (`--no-python /bin/sh WORKER WORK MODE`): what it is, then the uploaders of MODE,
# then it exits 0 at once.
WORKER = r'''
W="$1"; R="${LOCAL_RANK:-0}"
read -r _ _ _ _ PGID SID _ < /proc/$$/stat
echo "$$ $PGID $SID ${DDPRUN_AGENT:-none}" > "$W/worker.$R"
UPLOADER='@UPLOADER@'
case "$2" in
kept)
  "$DETACH_TEST_DDPRUN" detach -- sh -c "$UPLOADER" "$W" "kept.$R" || exit 9
  setsid sleep 60 > /dev/null 2>&1 &
  echo $! > "$W/sibling.$R"
  [ -n "$3" ] && exec sleep 60  # killed: the job ends when the test kills the agent
  ;;
nohup)
  "$DETACH_TEST_DDPRUN" detach -- sh -c "$UPLOADER" "$W" "kept.$R" || exit 9
  nohup sh -c "$UPLOADER" "$W" "nohup.$R" > /dev/null 2>&1 &
  setsid nohup sh -c "$UPLOADER" "$W" "setsid.$R" > /dev/null 2>&1 &
  # Both have written their pids before the worker exits (at most 5 s).
  i=0
  while { [ ! -s "$W/nohup.$R.pid" ] || [ ! -s "$W/setsid.$R.pid" ]; } && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  ;;
esac
exit 0
'''.replace("@UPLOADER@", UPLOADER)


def run(argv, env, cwd, timeout=60):
    """The run and how long it took."""
    start = time.monotonic()
    done = side_by_side.run(argv, env, cwd, timeout, hint=" (a kept process holding its output?)")
    return done, time.monotonic() - start


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def alive(pid):
    """Whether pid runs (a zombie is dead: reaped by whoever it was left to)."""
    stat = read(f"/proc/{pid}/stat")
    return stat is not None and stat[stat.rfind(")") + 2] != "Z"


def stat_fields(pid):
    """(pgid, sid) of a running process."""
    stat = read(f"/proc/{pid}/stat") or ""
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[2]), int(fields[3])


def environ(pid):
    return [e for e in (read(f"/proc/{pid}/environ") or "").split("\0") if e]


def cgroup_v2(pid):
    for line in (read(f"/proc/{pid}/cgroup") or "").splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def pid_of(work, name, done):
    path = os.path.join(work, name + ".pid")
    # Written by the uploader as it starts: by now, or in moments.
    wait_for(lambda: (read(path) or "").strip().isdigit(), 5, name)
    text = read(path)
    if not text or not text.strip().isdigit():
        fail(f"the uploader {name} never wrote its pid (files: {sorted(os.listdir(work))})\n{shown(done)}")
    return int(text)


def kill_ours(token):
    """SIGKILLs every process whose environment holds our token (bounded)."""
    entry = f"{TOKEN}={token}"
    for _ in range(50):
        found = 0
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != os.getpid() and entry in environ(int(name)) and alive(int(name)):
                found += 1
                try:
                    os.kill(int(name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not found:
            return
        time.sleep(0.05)


def job_env(work, token, ddprun):
    return dict(os.environ, DETACH_TEST_DDPRUN=ddprun, **{TOKEN: token})


def ddprun_argv(args, work, nproc, *worker_args):
    return [args.ddprun, "--standalone", "--nproc-per-node", str(nproc), "--no-python",
            "/bin/sh", os.path.join(work, "worker.sh"), work, *worker_args]


def ddprun_job(args, work, nproc, mode, token):
    return run(ddprun_argv(args, work, nproc, mode), job_env(work, token, args.ddprun), work)


def check_finishes(work, name, done, launcher):
    """After the go, the uploader `name` writes its result within 10 s."""
    if not wait_for(lambda: os.path.exists(os.path.join(work, name + ".done")), 10, name):
        fail(f"{launcher}: the uploader {name} did not finish within 10 s of the go "
             f"(files: {sorted(os.listdir(work))})\n{shown(done)}")


def kept(args, work, token):
    for nproc in (1, 2):
        sub = os.path.join(work, f"nproc{nproc}")
        os.mkdir(sub)
        shutil.copy(os.path.join(work, "worker.sh"), sub)
        done, seconds = ddprun_job(args, sub, nproc, "kept", token)
        if done.returncode != 0:
            fail(f"ddprun ({nproc} workers) did not exit 0\n{shown(done)}")
        for rank in range(nproc):
            name = f"kept.{rank}"
            uploader = pid_of(sub, name, done)
            worker_pid, worker_pgid, worker_sid, marker = (read(os.path.join(sub, f"worker.{rank}")) or "").split()
            # (a) ddprun did not wait for it: it still waits for the go.
            if not alive(uploader) or os.path.exists(os.path.join(sub, name + ".done")):
                fail(f"the kept uploader {name} ({uploader}) is not running after ddprun exited\n{shown(done)}")
            # (c) out of the worker's session and process group, out of the job's marker.
            pgid, sid = stat_fields(uploader)
            env = environ(uploader)
            agent_entries = [e for e in env if e.startswith("DDPRUN_AGENT=")]
            seen = (f"uploader {uploader}: pgid {pgid} sid {sid}; worker {worker_pid}: pgid {worker_pgid} "
                    f"sid {worker_sid}, marker {marker}; uploader's DDPRUN_* {[e for e in env if e.startswith('DDPRUN_')]}")
            if sid != uploader or pgid != uploader or str(sid) == worker_sid or str(pgid) == worker_pgid:
                fail(f"the kept uploader is not in a session of its own: {seen}")
            if agent_entries or f"DDPRUN_DETACHED={marker}" not in env:
                fail(f"the kept uploader's environment is not DDPRUN_DETACHED=<marker> without DDPRUN_AGENT: {seen}")
            agent_pid = marker.split("-", 1)[0]
            group = cgroup_v2(uploader)
            if group is not None and group.rstrip("/").endswith(f"/ddprun-{agent_pid}"):
                fail(f"the kept uploader is still in the worker cgroup {group}: {seen}")
            # Everything else keeps the no-orphans guarantee.
            sibling = int(read(os.path.join(sub, f"sibling.{rank}")) or "0")
            if sibling <= 0 or alive(sibling):
                fail(f"the sibling started with plain setsid ({sibling}) outlived the job\n{shown(done)}")
            print(f"{nproc} worker(s), rank {rank}: ddprun exited 0 in {seconds:.2f} s, uploader {uploader} "
                  f"runs on (sid {sid}, worker's {worker_sid}; cgroup {group}); the setsid sibling was killed")
        with open(os.path.join(sub, "go"), "w"):
            pass
        for rank in range(nproc):
            check_finishes(sub, f"kept.{rank}", done, "ddprun")
        print(f"{nproc} worker(s): every kept uploader finished after the job")
    killed_agent(args, work, token)


def killed_agent(args, work, token):
    """The agent SIGKILLed mid-job: its guardian kills the rest, never the kept uploader."""
    sub = os.path.join(work, "killed")
    os.mkdir(sub)
    shutil.copy(os.path.join(work, "worker.sh"), sub)
    with open(os.path.join(sub, "agent.out"), "w") as out:
        agent = subprocess.Popen(ddprun_argv(args, sub, 1, "kept", "wait"), env=job_env(sub, token, args.ddprun),
                                 cwd=sub, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = lambda: all((read(os.path.join(sub, f)) or "").strip() for f in ("kept.0.pid", "sibling.0"))
        if not wait_for(started, 20, "the worker's uploader and sibling"):
            fail(f"the worker did not start its uploader and sibling within 20 s "
                 f"(files: {sorted(os.listdir(sub))}):\n{read(os.path.join(sub, 'agent.out'))}")
    finally:
        agent.kill()
        agent.wait(timeout=30)
    uploader = int(read(os.path.join(sub, "kept.0.pid")))
    sibling = int(read(os.path.join(sub, "sibling.0")))
    output = read(os.path.join(sub, "agent.out"))
    if not wait_for(lambda: not alive(sibling), 10, "the sibling"):
        fail(f"after kill -9 of the agent, its setsid sibling {sibling} still runs after 10 s:\n{output}")
    if not alive(uploader):
        fail(f"after kill -9 of the agent, the guardian killed the kept uploader {uploader} too:\n{output}")
    with open(os.path.join(sub, "go"), "w"):
        pass
    if not wait_for(lambda: os.path.exists(os.path.join(sub, "kept.0.done")), 10, "kept.0"):
        fail(f"after kill -9 of the agent, the kept uploader did not finish within 10 s of the go:\n{output}")
    print(f"kill -9 of the agent: the guardian killed the setsid sibling, the kept uploader {uploader} finished")


def nohup(args, work, token):
    done, seconds = ddprun_job(args, work, 1, "nohup", token)
    if done.returncode != 0:
        fail(f"ddprun did not exit 0\n{shown(done)}")
    plain = {name: pid_of(work, name, done) for name in ("nohup.0", "setsid.0")}
    # Killed before ddprun exited (the agent's sweep is synchronous); the go then changes nothing.
    survivors = {name: pid for name, pid in plain.items() if alive(pid)}
    if survivors:
        fail(f"under ddprun, background uploaders outlived the job: {survivors}\n{shown(done)}")
    if not alive(pid_of(work, "kept.0", done)):
        fail(f"under ddprun, the `ddprun detach` uploader did not outlive the job\n{shown(done)}")
    with open(os.path.join(work, "go"), "w"):
        pass
    check_finishes(work, "kept.0", done, "ddprun")
    time.sleep(2)  # more than the uploader needs after the go (it checks every 0.1 s)
    finished = [name for name in plain if os.path.exists(os.path.join(work, name + ".done"))]
    if finished:
        fail(f"under ddprun, killed uploaders finished anyway: {finished}")
    print(f"ddprun: exit 0 in {seconds:.2f} s; nohup and setsid+nohup uploaders killed, the detached one finished")

    if not os.path.exists(TORCHRUN) or shutil.which(args.torchrun_python) is None:
        print(f"torchrun side by side skipped: {TORCHRUN} or {args.torchrun_python} is missing")
        return
    side = os.path.join(work, "torchrun")
    os.mkdir(side)
    worker = os.path.join(work, "worker.sh")
    anchor, anchor_seconds = run(torchrun_command(args.torchrun_python, "--nproc_per_node", "1",
                                  "--no_python", "/bin/sh", worker, side, "nohup"),
                                 job_env(side, token, args.ddprun), side, timeout=120)
    if anchor.returncode != 0:
        fail(f"torchrun 1.13 did not run the job: the anchor is broken\n{shown(anchor)}")
    for name in ("nohup.0", "setsid.0", "kept.0"):
        if not alive(pid_of(side, name, anchor)):
            fail(f"under torchrun, the uploader {name} did not outlive the job\n{shown(anchor)}")
    with open(os.path.join(side, "go"), "w"):
        pass
    for name in ("nohup.0", "setsid.0", "kept.0"):
        check_finishes(side, name, anchor, "torchrun 1.13")
    print(f"torchrun 1.13: exit 0 in {anchor_seconds:.2f} s; every uploader finished (nohup, setsid+nohup, "
          f"ddprun detach)")


SCENARIOS = {"kept": kept, "nohup": nohup}


# Every process of the test carries it: the cleanup's key.
RUN_TOKEN = secrets.token_hex(8)


def prepare(args, work):
    with open(os.path.join(work, "worker.sh"), "w") as f:
        f.write(WORKER)
    return (RUN_TOKEN,)


if __name__ == "__main__":
    scenario_main(__doc__, SCENARIOS, prefix="ddprun-detach-test-", before=prepare,
                  after=lambda: kill_ours(RUN_TOKEN))
