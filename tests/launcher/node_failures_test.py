#!/usr/bin/env python3
"""A node that keeps failing is not trusted (issue #37, point 5), with three real agents and real
Python workers (plain Python: no torch needed).

    node_failures_test.py --ddprun BIN --scheme {classes,root-cause}

A 1:3 job on 127.0.0.1 (c10d, the first agent hosts the store, --max-restarts 5): the third
agent's workers (SICK=1 in its environment only) touch their heartbeat file (progress, so the
user-error rule does not stop the job first) and exit 1 in every round; the others' workers touch
theirs and wait, until the round after three restarts, where they exit 0. The third agent is left
out after its third failure in a row (--max-node-failures 3 by default) and exits 82 with
--exit-codes classes (the root cause's 1 without); the two others re-form without it at once
(well before last_call_timeout) and exit 0.

Every wait is bounded and prints what it saw when it gives up.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from agents import Agent  # noqa: E402
from ports import free_port  # noqa: E402

STARTS_HOSTING = 30  # seconds: the first agent says it hosts the store (a hang guard)
JOB_TIMEOUT = 120    # seconds: the whole job ends (a hang guard, far above what it takes)
LAST_CALL = 30       # seconds: a re-form that waited for the left-out node would take this long

WORKER = """
import os, sys, time

name = os.environ["AGENT_NAME"]
restarts = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
world = os.environ["WORLD_SIZE"]
def stamp(what):
    with open(os.environ["STAMPS"], "a") as f:
        f.write(f"{name} {what} {restarts} {world} {time.time()}\\n")
stamp("start")
os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])  # progress
if os.environ.get("SICK"):
    time.sleep(0.2)
    stamp("fail")
    sys.exit(1)
if restarts >= 3:
    time.sleep(0.2)
    stamp("done")
    sys.exit(0)
time.sleep(100)  # stopped by the round's stop
"""




def fail(what, agents, work):
    print(f"FAIL: {what}")
    for agent in agents:
        print(f"--- {agent.name}: exit {agent.process.poll()} ---\n{agent.stderr()}")
    stamps = os.path.join(work, "stamps")
    if os.path.exists(stamps):
        with open(stamps) as f:
            print(f"--- worker stamps ---\n{f.read()}")
    for agent in agents:
        if agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait()
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--scheme", choices=["classes", "root-cause"], required=True)
    args = parser.parse_args()
    expected_left = 82 if args.scheme == "classes" else 1
    with tempfile.TemporaryDirectory(prefix="ddprun-node-failures-") as work:
        script = os.path.join(work, "train.py")
        with open(script, "w") as f:
            f.write(WORKER)
        stamps = os.path.join(work, "stamps")
        port = free_port()
        command = [args.ddprun, "--nnodes", "1:3", "--nproc-per-node", "1",
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                   "--rdzv-id", f"node-failures-{os.getpid()}",
                   "--rdzv-conf", f"last_call_timeout={LAST_CALL},join_timeout=90",
                   "--max-restarts", "5", "--exit-codes", args.scheme, script]
        agents = [Agent("a", command, work, {"STAMPS": stamps})]
        deadline = time.monotonic() + STARTS_HOSTING
        while "hosting the rendezvous store" not in agents[0].stderr():
            if time.monotonic() > deadline or agents[0].process.poll() is not None:
                fail(f"agent a did not say it hosts the store within {STARTS_HOSTING} s", agents,
                     work)
            time.sleep(0.05)
        agents.append(Agent("b", command, work, {"STAMPS": stamps}))
        agents.append(Agent("c", command, work, {"STAMPS": stamps, "SICK": "1"}))
        deadline = time.monotonic() + JOB_TIMEOUT
        while any(agent.process.poll() is None for agent in agents):
            if time.monotonic() > deadline:
                fail(f"the job still runs after {JOB_TIMEOUT} s", agents, work)
            time.sleep(0.1)
        codes = {agent.name: agent.process.returncode for agent in agents}
        print(f"exit codes: {codes}")
        if codes != {"a": 0, "b": 0, "c": expected_left}:
            fail(f"expected a 0, b 0, c {expected_left}", agents, work)
        c_log = agents[2].stderr()
        if ("this node is left out of the job" not in c_log or
                "the root cause of the last 3 failures in a row (--max-node-failures 3)" not in c_log):
            fail("c's log does not say it is left out after 3 failures in a row", agents, work)
        for agent in agents[:2]:
            if "it leaves the job, which goes on with 2 node(s)" not in agent.stderr():
                fail(f"{agent.name}'s log does not say the node leaves", agents, work)
        seen = []
        with open(stamps) as f:
            for line in f:
                name, what, restarts, world, when = line.split()
                seen.append((name, what, int(restarts), int(world), float(when)))
        fails = [s for s in seen if s[0] == "c" and s[1] == "fail"]
        done = [s for s in seen if s[1] == "done"]
        if len(fails) != 3:
            fail(f"c's workers failed {len(fails)} times, expected 3", agents, work)
        if sorted(s[0] for s in done) != ["a", "b"] or any(s[3] != 2 for s in done):
            fail(f"expected a's and b's workers done in a world of 2, saw {done}", agents, work)
        if any(s[0] == "c" and s[2] >= 3 for s in seen):
            fail("c started workers after it was left out", agents, work)
        starts = [s[4] for s in seen if s[1] == "start" and s[2] == 3]
        gap = min(starts) - fails[-1][4]
        print(f"from c's third failure to the re-formed round's first worker: {gap:.2f} s "
              f"(last_call_timeout {LAST_CALL} s)")
        if gap >= LAST_CALL / 2:
            fail(f"the re-form took {gap:.2f} s: it waited for the left-out node", agents, work)
        print("PASS")


if __name__ == "__main__":
    main()
