#!/usr/bin/env python3
"""The restart policy and the exit-code contract (issue #37) with the real agent and real Python
workers (plain Python: no torch needed).

    restart_policy_test.py --ddprun BIN --scenario NAME

  same-error     a script raising the same ValueError at start, --max-restarts 3 --run-path: the
                 job stops after 1 restart with the user-error line; the root cause's 1, and 80
                 with --exit-codes classes
  backoff        a worker that touched its heartbeat file (progress) and then crashed restarts
                 after --restart-backoff 2: the gap between the attempts, from the workers' own
                 timestamps, is at least 2 s (the upper bound is a hang guard)
  no-restart     a worker exiting 93 with --no-restart-exit-code 93: no restart, exit 93
  sigterm        SIGTERM to ddprun with --exit-codes classes while workers run: exit 83

Every run is bounded (a timeout) and prints what it saw when it fails.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

RUN_TIMEOUT = 60  # seconds: a hang guard, far above what each run takes

SAME_ERROR = """
import os
def load():
    raise ValueError("shard " + os.environ["RANK"] + " is corrupt")
load()
"""

CRASH_AFTER_PROGRESS = """
import os, sys, time
with open(os.environ["STAMPS"], "a") as f:
    f.write(f"start {os.environ['TORCHELASTIC_RESTART_COUNT']} {time.time()}\\n")
time.sleep(0.05)
os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])  # progress
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    with open(os.environ["STAMPS"], "a") as f:
        f.write(f"crash 0 {time.time()}\\n")
    sys.exit(5)
"""

EXIT_93 = """
import sys
sys.exit(93)
"""

SLEEPER = """
import os, time
open(os.environ["READY"], "w").close()
time.sleep(60)
"""


def fail(what, result=None):
    print(f"FAIL: {what}")
    if result is not None:
        print(f"exit code {result.returncode}\n--- stderr ---\n{result.stderr}")
    sys.exit(1)


def write(work, name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def run(ddprun, args, env=None):
    command = [ddprun, "--standalone", "--nproc-per-node", "1", *args]
    print("$", " ".join(command))
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                              env=env)
    except subprocess.TimeoutExpired as expired:
        print(f"FAIL: still running after {RUN_TIMEOUT} s\n--- stderr so far ---\n{expired.stderr}")
        sys.exit(1)


def last_line(result):
    lines = [line for line in result.stderr.splitlines() if line.startswith("ddprun: error:")]
    return lines[-1] if lines else ""


def same_error(ddprun, work):
    script = write(work, "train.py", SAME_ERROR)
    for scheme, expected in (("root-cause", 1), ("classes", 80)):
        result = run(ddprun, ["--max-restarts", "3", "--run-path", "--exit-codes", scheme, script])
        line = last_line(result)
        print(f"--exit-codes {scheme}: exit {result.returncode}; {line}")
        if result.returncode != expected:
            fail(f"exit code {result.returncode}, expected {expected}", result)
        if "after 1 restart(s)" not in line or "user failure" not in line:
            fail("the last line does not say 1 restart and a user failure", result)
        if "ValueError at " not in line:
            fail("the last line does not name the signature (ValueError at FILE:LINE)", result)


def backoff(ddprun, work):
    script = write(work, "train.py", CRASH_AFTER_PROGRESS)
    stamps = os.path.join(work, "stamps")
    env = dict(os.environ, STAMPS=stamps)
    result = run(ddprun, ["--max-restarts", "3", "--restart-backoff", "2", script], env)
    if result.returncode != 0:
        fail("the restarted job did not succeed", result)
    seen = {}
    with open(stamps) as f:
        for line in f:
            kind, attempt, when = line.split()
            seen[(kind, attempt)] = float(when)
    print(f"stamps: {seen}")
    if ("crash", "0") not in seen or ("start", "1") not in seen:
        fail(f"expected a crash of attempt 0 and a start of attempt 1, saw {seen}", result)
    gap = seen[("start", "1")] - seen[("crash", "0")]
    print(f"gap between the crash and the restart: {gap:.2f} s (back-off 2 s)")
    if gap < 2.0:
        fail(f"the restart came {gap:.2f} s after the crash, before the 2 s back-off", result)
    if gap > 30:
        fail(f"the restart came {gap:.2f} s after the crash", result)
    if "restart 1 in 2.0 s (back-off" not in result.stderr:
        fail("the log does not say 'restart 1 in 2.0 s (back-off'", result)


def no_restart(ddprun, work):
    script = write(work, "train.py", EXIT_93)
    result = run(ddprun, ["--max-restarts", "3", "--no-restart-exit-code", "93", script])
    line = last_line(result)
    print(f"exit {result.returncode}; {line}")
    if result.returncode != 93:
        fail(f"exit code {result.returncode}, expected 93", result)
    if "after 0 restart(s)" not in line or "no-restart exit code 93" not in line:
        fail("the last line does not say 0 restarts and the no-restart exit code", result)


def sigterm(ddprun, work):
    script = write(work, "train.py", SLEEPER)
    ready = os.path.join(work, "ready")
    env = dict(os.environ, READY=ready)
    command = [ddprun, "--standalone", "--nproc-per-node", "1", "--exit-codes", "classes", script]
    print("$", " ".join(command))
    agent = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + RUN_TIMEOUT
    while not os.path.exists(ready):
        if time.monotonic() > deadline or agent.poll() is not None:
            agent.kill()
            fail(f"the worker did not start within {RUN_TIMEOUT} s (agent: {agent.poll()}); "
                 f"stderr: {agent.communicate()[1]}")
        time.sleep(0.05)
    agent.send_signal(signal.SIGTERM)
    try:
        _, stderr = agent.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        agent.kill()
        fail(f"ddprun still running {RUN_TIMEOUT} s after SIGTERM")
    print(f"exit {agent.returncode}")
    if agent.returncode != 83:
        fail(f"exit code {agent.returncode}, expected 83\n--- stderr ---\n{stderr}")


SCENARIOS = {"same-error": same_error, "backoff": backoff, "no-restart": no_restart,
             "sigterm": sigterm}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        SCENARIOS[args.scenario](args.ddprun, work)
    print("PASS")


if __name__ == "__main__":
    main()
