#!/usr/bin/env python3
"""The health gate before each round and the round hooks (issue #38, points 1, 3 and 6), with real
agents and real (plain Python) workers on 127.0.0.1.

    health_test.py --ddprun BIN --scenario SCENARIO [--fake-nvml DIR]

check-fails     a 1:2 job; agent b's --health-check always fails: b never starts a worker, says why
                each time, its cooldown doubles (--health-cooldown 1: 1 s, 2 s, 4 s), and a finishes
                0 on its own.
pre-hook-fails  the same with b's --pre-round-hook failing instead.
comes-back      b's --health-check reads a file the test flips: b fails twice (cooldown 1 s, then
                2 s), then passes, joins, and the job re-forms with both (WORLD_SIZE 2);
                `ddprun status` counts b's 2 exclusions; both finish 0.
sick-gpu        b sees two GPUs through an NVML stand-in (--fake-nvml: libnvidia-ml.so.1, its GPU 1
                lost): b is left out with that reason, a finishes 0.
hooks           one agent with a pre-round hook and a post-round hook that exits 3: their output is
                in the log, prefixed with the hook's option; the post-round hook's code is logged,
                never fatal (the job exits 0).

Every wait is bounded and prints what it saw when it gives up.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from agents import Agent  # noqa: E402
from ports import free_port  # noqa: E402

STARTS_HOSTING = 30  # seconds: the first agent says it hosts the store (a hang guard)
JOB_TIMEOUT = 90     # seconds: the job ends (a hang guard, far above what it takes)
LAST_CALL = 10       # seconds: round 0 waits this long for more nodes before it forms

WORKER = """
import os, sys, time

name = os.environ["AGENT_NAME"]
world = os.environ["WORLD_SIZE"]
with open(os.environ["STAMPS"], "a") as f:
    f.write(f"{name} start {world} {time.time()}\\n")
finish = os.environ["FINISH"]
end = time.time() + 60
while not os.path.exists(finish) and time.time() < end:
    time.sleep(0.05)
sys.exit(0)
"""




class Test:
    def __init__(self, work):
        self.work = work
        self.agents = []
        self.stamps = os.path.join(work, "stamps")
        self.finish = os.path.join(work, "finish")

    def stamped(self):
        if not os.path.exists(self.stamps):
            return ""
        with open(self.stamps) as f:
            return f.read()

    def fail(self, what):
        print(f"FAIL: {what}")
        for agent in self.agents:
            print(f"--- {agent.name}: exit {agent.process.poll()} ---\n{agent.stderr()}")
        print(f"--- worker stamps ---\n{self.stamped()}")
        self.stop_all()
        sys.exit(1)

    def stop_all(self):
        for agent in self.agents:
            if agent.process.poll() is None:
                agent.process.kill()
                agent.process.wait()

    def wait_for(self, condition, what, patience):
        deadline = time.monotonic() + patience
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"{what}: not within {patience} s")
            time.sleep(0.05)


def start_job(args, test, b_options, b_env=None, nnodes="1:2"):
    script = os.path.join(test.work, "train.py")
    with open(script, "w") as f:
        f.write(WORKER)
    port = free_port()
    endpoint = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", f"health-{os.getpid()}"]
    base = [args.ddprun, "--nnodes", nnodes, "--nproc-per-node", "1", *endpoint,
            "--rdzv-conf", f"last_call_timeout={LAST_CALL},join_timeout=60"]
    env = {"STAMPS": test.stamps, "FINISH": test.finish}
    test.agents.append(Agent("a", [*base, script], test.work, env))
    test.wait_for(lambda: "hosting the rendezvous store" in test.agents[0].stderr(),
                  "agent a says it hosts the store", STARTS_HOSTING)
    test.agents.append(Agent("b", [*base, "--health-cooldown", "1", *b_options, script], test.work,
                             dict(env, **(b_env or {}))))
    return endpoint


EXCLUDED = re.compile(r"health gate: (.*?) failed: (.*?); this node stays out of the job and "
                      r"checks again in ([0-9.]+) s")


def exclusions(agent):
    return EXCLUDED.findall(agent.stderr())


def left_out(args, test, b_options, b_env, check, reason):
    """b fails the gate every time: it never starts a worker, a runs alone and finishes 0."""
    start_job(args, test, b_options, b_env)
    a, b = test.agents
    # a forms round 0 alone once last call ends; b stays out meanwhile, its cooldown doubling.
    test.wait_for(lambda: len(exclusions(b)) >= 3, "b fails the health gate 3 times", 20)
    said = exclusions(b)
    if any(c != check or reason not in r for c, r, _ in said):
        test.fail(f"b's exclusions should name {check!r} and say {reason!r}: {said}")
    waits = [float(w) for _, _, w in said[:3]]
    if waits != [1.0, 2.0, 4.0]:
        test.fail(f"b's cooldown should double from 1 s: {waits}")
    test.wait_for(lambda: "a start 1" in test.stamped(), "a's worker starts (WORLD_SIZE 1)",
                  LAST_CALL + 20)
    with open(test.finish, "w"):
        pass
    test.wait_for(lambda: a.process.poll() is not None, "agent a ends", JOB_TIMEOUT)
    if a.process.returncode != 0:
        test.fail(f"agent a should exit 0, not {a.process.returncode}")
    if "b start" in test.stamped():
        test.fail("b started a worker although it failed the health gate")
    b.process.terminate()
    b.process.wait(timeout=30)


def comes_back(args, test):
    flag = os.path.join(test.work, "healthy")
    endpoint = start_job(args, test, ["--health-check", f"test -e {flag}"])
    a, b = test.agents
    test.wait_for(lambda: len(exclusions(b)) >= 2, "b fails the health gate twice", 20)
    waits = [float(w) for _, _, w in exclusions(b)[:2]]
    if waits != [1.0, 2.0]:
        test.fail(f"b's cooldown should double from 1 s: {waits}")
    with open(flag, "w"):
        pass
    test.wait_for(lambda: "health gate: this node passes again" in b.stderr(),
                  "b passes the health gate", 20)
    test.wait_for(lambda: "b start 2" in test.stamped() and "a start 2" in test.stamped(),
                  "the job re-forms with both nodes (WORLD_SIZE 2)", LAST_CALL + 20)
    # Each agent publishes its snapshot when it changes, within a moment.
    deadline = time.monotonic() + 15
    while True:
        shown = subprocess.run([args.ddprun, "status", *endpoint], capture_output=True,
                               text=True, timeout=20)
        if "health gate: excluded 2 times" in shown.stdout:
            break
        if time.monotonic() > deadline:
            test.fail("`ddprun status` should count b's 2 exclusions within 15 s:\n"
                      f"{shown.stdout}{shown.stderr}")
        time.sleep(0.2)
    with open(test.finish, "w"):
        pass
    for agent in test.agents:
        test.wait_for(lambda: agent.process.poll() is not None, f"agent {agent.name} ends",
                      JOB_TIMEOUT)
    codes = {agent.name: agent.process.returncode for agent in test.agents}
    if codes != {"a": 0, "b": 0}:
        test.fail(f"both agents should exit 0: {codes}")


def hooks(args, test):
    script = os.path.join(test.work, "train.py")
    with open(script, "w") as f:
        f.write(WORKER)
    with open(test.finish, "w"):
        pass
    command = [args.ddprun, "--standalone", "--nproc-per-node", "1",
               "--pre-round-hook", 'echo "pre $DDPRUN_HOOK round $DDPRUN_ROUND"',
               "--post-round-hook", "echo post-output; exit 3", script]
    test.agents.append(Agent("a", command, test.work,
                             {"STAMPS": test.stamps, "FINISH": test.finish}))
    a = test.agents[0]
    test.wait_for(lambda: a.process.poll() is not None, "the agent ends", JOB_TIMEOUT)
    log = a.stderr()
    for wanted in ["[--pre-round-hook] pre --pre-round-hook round -1",
                   "[--post-round-hook] post-output",
                   "--post-round-hook exited with 3 (never fatal)"]:
        if wanted not in log:
            test.fail(f"the log should hold {wanted!r}")
    if a.process.returncode != 0:
        test.fail(f"a failing post-round hook is not fatal: exit {a.process.returncode}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--scenario", required=True,
                        choices=["check-fails", "pre-hook-fails", "comes-back", "sick-gpu", "hooks"])
    parser.add_argument("--fake-nvml", help="the directory of the NVML stand-in library")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddprun-health-") as work:
        test = Test(work)
        try:
            if args.scenario == "check-fails":
                left_out(args, test, ["--health-check", "echo checking; exit 1"], None,
                         "--health-check", "exited with 1")
                if "[--health-check] checking" not in test.agents[1].stderr():
                    test.fail("the check's output should be in b's log, prefixed")
            elif args.scenario == "pre-hook-fails":
                left_out(args, test, ["--pre-round-hook", "exit 4"], None, "--pre-round-hook",
                         "exited with 4")
            elif args.scenario == "sick-gpu":
                library = os.environ.get("LD_LIBRARY_PATH", "")
                left_out(args, test, [],
                         {"DDPRUN_FAKE_NVML": "ok,lost",
                          "LD_LIBRARY_PATH": f"{args.fake_nvml}:{library}".rstrip(":")},
                         "gpu 1", "NVML cannot reach it: GPU is lost")
            elif args.scenario == "comes-back":
                comes_back(args, test)
            else:
                hooks(args, test)
        finally:
            test.stop_all()
    print("PASS")


if __name__ == "__main__":
    main()
