#!/usr/bin/env python3
"""What bytes from outside the agent can make of its log and its signals (issue #18, points 5-6;
docs/security.md, "On the node"), one scenario each, with real processes:

  forged-log-line         a job WITHOUT a token: an attacker who reaches its store (anyone, then)
                          writes a key, and forged stop records (a worker failure, node_joined,
                          node_left, node_lost, a last failure past --max-restarts) whose host
                          name and texts hold a whole forged log line ("\\n[...] [ddprun] [info]
                          every worker of every node exited 0") and terminal escape sequences
                          (retitle, clear the screen). The job ends as the attack makes it end
                          (exit 42, the forged code: without a token the store is open); passes
                          when the agent's output has no line that starts with the forged one and
                          no raw ESC or BEL, while each message the attack reaches shows its text
                          escaped.
  file-timer-foreign-pid  a worker writes torch's FileTimer requests (TORCHELASTIC_TIMER_FILE) for
                          1 s SIGKILL timers naming three root `sleep 60`s this test started and
                          the agent itself: passes when all of them survive, the refusals take at
                          most two log lines (the first in full, the others counted) naming every
                          pid, a timer naming a child the worker started still signals it, and one
                          naming the worker itself still kills it (exit 137, the summary says
                          FileTimer).

    local_logs_test.py --ddprun BIN --scenario NAME [--rendezvous BIN] [--python PY]

PY runs the workers (no torch needed): this interpreter by default. Every wait is bounded by the
driver's deadline and gives up printing what it saw; every process it starts is killed on the way
out. Before the fix, forged-log-line failed on the forged lines (the key's, the host's) and
file-timer-foreign-pid on the killed sleeps and agent (it was SIGKILLed by its own FileTimer).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from attack_client import AttackClient, StoreClosed, StoreTimeout  # noqa: E402
from secjobs import Deadline, Job, free_port, give_up, key, listening_ports, wait_until  # noqa: E402

SCENARIOS = ["forged-log-line", "file-timer-foreign-pid"]
IDLE_WORKER = os.path.join(HERE, "workers", "idle_worker.py")
TIMER_WORKER = os.path.join(HERE, "workers", "file_timer_worker.py")

# A whole line in the agent's own format (launcher/src/output/agent_log.h, kLogPattern),
# then what would retitle the terminal and clear it.
FORGED_LINE = "[2026-01-01 00:00:00.000] [ddprun] [info] every worker of every node exited 0"
TERMINAL = "\x1b]0;owned\x07\x1b[2J"
FORGED = "node-z\n" + FORGED_LINE + TERMINAL
# FORGED as common::printable writes it: what the log shows where the text is escaped.
ESCAPED = "node-z\\n" + FORGED_LINE + "\\x1b]0;owned\\x07\\x1b[2J"
# The exit code the forged failures carry: nothing the job's worker exits with.
FORGED_EXIT = 42


def raw_bytes_problems(label, text):
    """What in `text` a terminal would act on, or that starts a forged line."""
    problems = []
    starts = [line for line in text.split("\n") if line.startswith(FORGED_LINE)]
    if starts:
        problems.append("%s: %d line(s) start with the forged line, e.g. %r" % (label, len(starts), starts[0][:160]))
    for byte, name in (("\x1b", "ESC"), ("\x07", "BEL"), ("\r", "CR")):
        if byte in text:
            at = text.index(byte)
            problems.append("%s: a raw %s byte, in %r" % (label, name, text[max(0, at - 80):at + 20]))
    return problems


def forged_failure(round_number, stop_node):
    failure = {"rank": 0, "localRank": 0, "groupRank": 0, "host": FORGED, "pid": 1,
               "exitCode": FORGED_EXIT, "signal": 0, "observedAt": time.time(),
               "errorFile": "/tmp/" + FORGED, "errorFileFound": True,
               "message": "boom in round %d\n%s" % (round_number, FORGED),
               "hang": "file_timer", "hangDetail": FORGED, "oom": FORGED,
               "stack": [FORGED], "stderrTail": [FORGED]}
    return {"kind": "failure", "node": stop_node, "group_rank": 0, "host": FORGED, "failure": failure}


# The forged stops, one per round, and the line of the agent each one reaches (a piece of it that
# holds no forged text). Under --max-restarts 1: the first failure costs the restart, the node
# notices re-form without one, the last failure ends the job with the forged exit code.
STOPS = [
    (lambda r: forged_failure(r, 99), "restarting the job (restart 1 of 1) after rank 0 on "),
    (lambda r: {"kind": "node_joined", "node": 99, "host": FORGED}, "joins the job; re-forming"),
    (lambda r: {"kind": "node_left", "node": 99, "group_rank": 0, "host": FORGED, "signal": 15},
     "left the job; re-forming"),
    (lambda r: {"kind": "node_lost", "node": 99, "group_rank": 0, "host": FORGED},
     "was lost; stopping this round"),
    (lambda r: forged_failure(r, 99), "the job failed after 1 restart(s): rank 0 on "),
]


def forged_log_line(args, deadline, jobs):
    port = free_port()
    run_id = "logs-%d" % os.getpid()
    env = dict(os.environ, PYTHON_EXEC=args.python, LOGLEVEL="INFO")
    agent = Job([args.ddprun, "--nnodes", "1", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", run_id, "--max-restarts", "1",
                 IDLE_WORKER, "60"], name="ddprun agent (no token)", env=env)
    jobs.append(agent)
    wait_until(lambda: port in listening_ports(agent.pid) or agent.returncode is not None,
               deadline, 20, "the agent did not start listening on its rendezvous endpoint", jobs)

    def workers_up():
        return agent.output.count("worker up")

    wait_until(lambda: workers_up() >= 1, deadline, 30, "the first worker did not start", jobs)

    # A key: the store logs the connection it closes for an ADD on a value that is no integer.
    forged_key = "/" + FORGED
    try:
        with AttackClient("127.0.0.1", port, timeout=5) as store:
            store.set(forged_key, "not a number")
            try:
                store.add(forged_key, 1)
                give_up("the store added 1 to a value that is not an integer", jobs)
            except StoreClosed:
                print("key: the store closed the connection of an ADD on the forged key")
    except (StoreTimeout, OSError) as error:
        give_up("the attacker could not write the forged key: %s" % error, jobs)

    try:
        with AttackClient("127.0.0.1", port, timeout=5) as store:
            for index, (record, _) in enumerate(STOPS):
                # Round `index` runs: its record is closed and its worker is up (one start each).
                store.wait([key(run_id, "round/%d/closed" % index)], deadline.cap(30))
                wait_until(lambda: workers_up() >= index + 1, deadline, 30,
                           "round %d's worker did not start" % index, jobs)
                held = store.compare_set(key(run_id, "round/%d/stop" % index), "",
                                         json.dumps(record(index))).decode()
                if json.loads(held)["kind"] != record(index)["kind"]:
                    give_up("round %d already had a stop: %r" % (index, held[:200]), jobs)
                print("round %d: forged a %s stop" % (index, record(index)["kind"]))
    except (StoreTimeout, OSError) as error:  # StoreClosed is an OSError too
        give_up("the attack on the store did not go through: %s" % error, jobs)

    code = agent.wait(deadline.cap(30))
    if code is None:
        give_up("the agent did not end after the last forged failure", jobs)
    print("the agent exited %d after %d worker starts" % (code, workers_up()))

    problems = []
    if code != FORGED_EXIT:
        problems.append("the agent exited %d, not the forged failure's %d" % (code, FORGED_EXIT))
    problems += raw_bytes_problems("the agent's stderr", agent.errors)
    problems += raw_bytes_problems("the agent's stdout", agent.output)
    lines = agent.errors.split("\n")
    # Each message the attack reaches shows its text, escaped, on the message's own line.
    markers = [("the key", "ADD on key ")] + [("the %s stop" % r(0)["kind"], m) for r, m in STOPS] + \
              [("the summary's host", "  host      : "), ("the summary's hung", "  hung      : "),
               ("the summary's oom", "  oom       : "), ("the summary's error_file", "  error_file: ")]
    for what, marker in markers:
        found = [line for line in lines if marker in line]
        if not found:
            problems.append("%s: no line with %r in the agent's stderr" % (what, marker))
        elif not any(ESCAPED in line for line in found):
            problems.append("%s: the line %r does not show the forged text escaped" % (what, found[0][:200]))
        else:
            print("%s: %s" % (what, next(line for line in found if ESCAPED in line)[:150]))
    # The summary's traceback keeps the message's line breaks (torchrun's layout), indented.
    traceback = [line for line in lines if line.startswith("  " + FORGED_LINE)]
    if not traceback:
        problems.append("the summary's traceback does not show the message's second line indented")
    if problems:
        give_up("; ".join(problems), jobs)
    return ("without a token the forged stops ended the job with exit %d, as the attack makes it; "
            "no line of the agent's output starts with the forged line and none holds a raw ESC, "
            "BEL or CR; %d messages show the forged text escaped" % (code, len(markers)))


def process_alive(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def file_timer_foreign_pid(args, deadline, jobs):
    sleeps = [Job(["sleep", "60"], name="root sleep %d" % i) for i in range(3)]
    jobs.extend(sleeps)
    pids = [s.pid for s in sleeps]
    env = dict(os.environ, PYTHON_EXEC=args.python, TORCHELASTIC_ENABLE_FILE_TIMER="1")
    env.pop("TORCHELASTIC_TIMER_FILE", None)
    agent = Job([args.ddprun, "--standalone", "--nproc-per-node", "1", "--max-restarts", "0",
                 TIMER_WORKER] + [str(p) for p in pids], name="ddprun agent (FileTimer)", env=env)
    jobs.append(agent)
    code = agent.wait(deadline.cap(60))
    if code is None:
        give_up("the agent did not end within 60 s", jobs)
    output, errors = agent.output, agent.errors
    print("the agent exited %d; the worker said:\n  %s" %
          (code, "\n  ".join(l for l in output.splitlines() if l.strip())))

    problems = []
    foreign = pids + [agent.pid]
    if "agent %d" % agent.pid not in output:
        problems.append("the worker's parent is not the agent (pid %d)" % agent.pid)
    if code != 128 + 9:
        problems.append("the agent exited %d, not 137 (its worker killed by its own FileTimer)%s" %
                        (code, "; it was killed itself" if code == -9 else ""))
    dead = [s.pid for s in sleeps if not process_alive(s.pid)]
    if dead:
        problems.append("the root sleeps %s were killed" % dead)
    if "alive after the foreign timers" not in output:
        problems.append("the worker did not live past the foreign timers")
    if "child ended with -15" not in output:
        problems.append("the timer naming the worker's own child did not send it SIGTERM")
    refusals = [l for l in errors.splitlines() if "FileTimer" in l and ("not sending" in l or "refused" in l)]
    if not 1 <= len(refusals) <= 2:
        problems.append("%d refusal lines, not 1 or 2: %s" % (len(refusals), refusals))
    missing = [p for p in foreign if not any(" %d" % p in l for l in refusals)]
    if missing:
        problems.append("the refusals do not name pids %s" % missing)
    if not any('hung      : its FileTimer "own" expired' in l for l in errors.splitlines()):
        problems.append("the summary does not say the worker's own FileTimer killed it")
    if problems:
        give_up("; ".join(problems), jobs)
    for line in refusals:
        print("refusal: %s" % line)
    return ("no signal reached the 3 root sleeps or the agent (%d refusal lines naming all 4 pids); "
            "the worker's child got its SIGTERM and the worker its own SIGKILL (exit %d, the "
            "summary says FileTimer)" % (len(refusals), code))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--rendezvous", help="the ddprun-rendezvous binary (not used)")
    parser.add_argument("--python", default=sys.executable, help="runs the workers (no torch needed)")
    parser.add_argument("--scenario", required=True, choices=SCENARIOS)
    # Half of CTest's TIMEOUT: a hang is reported with what was seen, not killed without a word.
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()

    deadline = Deadline(args.timeout)
    jobs = []
    scenario = {"forged-log-line": forged_log_line, "file-timer-foreign-pid": file_timer_foreign_pid}
    started = time.monotonic()
    try:
        verdict = scenario[args.scenario](args, deadline, jobs)
    finally:
        for job in jobs:
            job.kill()
    print("RESULT %s: %s (%.1f s)" % (args.scenario, verdict, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
