#!/usr/bin/env python3
"""Hot spares (issue #38, point 2), with three real agents and real Python workers (plain
Python: no torch needed).

    spares_test.py --ddprun BIN --scenario c10d|etcd|race-348|lemon

A 2:2 job on 127.0.0.1 with --spares 1: agents a and b run the workers, agent c, started once
they run, is the spare: it says "spare: waiting for a place", starts no worker, and `ddprun
status` shows it in the pool ("spares: 1 waiting (host), 1 wanted").

  c10d      b's agent is SIGKILLed: the next round takes the spare at once; the time from the
            kill to the spare's workers running is printed (the goal: < 1 s; the bound checked
            is a hang guard), and the job finishes 0 on a and c in a world of 2.
  etcd      the same on a one-member etcd on loopback (skipped, 77, without /usr/bin/etcd),
            where a loss is seen at the lease's end: the goal is the lease timeout + 1 s.
  race-348  NVIDIA/nvidia-resiliency-ext#348: once the spare waits, b's worker fails (a
            restart) and b's agent is SIGKILLed at that moment, as the restart round forms with
            the spare in it: the job goes on with the spare and finishes 0 (a and c exit 0).
  lemon     once the spare waits, b's workers report progress and fail in every round: after
            the third failure in a row (--max-node-failures 3) b leaves the job, although the
            job runs at MIN = MAX, and the spare takes its seat at once (not after
            last_call_timeout); the job finishes 0 on a and c in a world of 2, b exits 1.

Every wait is bounded and prints what it saw when it gives up.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from agents import Agent  # noqa: E402
from ports import free_port  # noqa: E402

SKIP = 77
STARTS = 30          # seconds: the agents start and the spare says it waits (a hang guard)
STATUS_WAIT = 20     # seconds: `ddprun status` shows the pool
JOB_TIMEOUT = 120    # seconds: the whole job ends (a hang guard)
REPLACE_GUARD = 15   # seconds: the spare's workers run after the kill (a hang guard, for ASan)
LEASE = 3            # seconds: etcd's lease timeout here (keep_alive_interval 1 x 3 attempts)

WORKER = """
import os, sys, time

name = os.environ["AGENT_NAME"]
generation = int(os.environ["DDPRUN_GENERATION"])
world = os.environ["WORLD_SIZE"]
def stamp(what):
    with open(os.environ["STAMPS"], "a") as f:
        f.write(f"{name} {what} {generation} {world} {time.time()}\\n")
stamp("start")
if os.environ.get("LEMON"):  # every round: progress, then a failure
    os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
    while not os.path.exists(os.environ["FAIL_NOW"]):
        time.sleep(0.01)
    time.sleep(0.2)
    stamp("fail")
    sys.exit(1)
if os.environ.get("BESIDE_LEMON"):  # a and c: done in the round after b's third failure
    os.utime(os.environ["DDPRUN_HEARTBEAT_FILE"])
    if generation >= 3:
        time.sleep(1.0)
        stamp("done")
        sys.exit(0)
    time.sleep(100)
if generation == 0 and os.environ.get("SICK"):
    end = time.time() + 60
    while not os.path.exists(os.environ["FAIL_NOW"]) and time.time() < end:
        time.sleep(0.01)
    stamp("fail")
    sys.exit(1)
if generation >= 1 and name != "b":
    time.sleep(1.0)
    stamp("done")
    sys.exit(0)
time.sleep(100)  # stopped by the round's stop
"""




def read_stamps(work):
    path = os.path.join(work, "stamps")
    seen = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 5:
                    name, what, generation, world, when = parts
                    seen.append((name, what, int(generation), int(world), float(when)))
    return seen


def fail(what, agents, work, extra=None):
    print(f"FAIL: {what}")
    for agent in agents:
        print(f"--- {agent.name}: exit {agent.process.poll()} ---\n{agent.stderr()}")
    print("--- worker stamps ---")
    for stamp in read_stamps(work):
        print(" ".join(str(part) for part in stamp))
    if extra:
        print(extra)
    for agent in agents:
        if agent.process.poll() is None:
            agent.process.kill()
            agent.process.wait()
    sys.exit(1)


def wait_for(what, done, agents, work, patience):
    deadline = time.monotonic() + patience
    while not done():
        if time.monotonic() > deadline:
            fail(f"{what}: not within {patience} s", agents, work)
        time.sleep(0.02)


def run_job(args, work, backend, endpoint, scenario):
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(WORKER)
    stamps = os.path.join(work, "stamps")
    run_id = f"spares-{os.getpid()}"
    conf = "join_timeout=90,last_call_timeout=30"
    if backend == "etcd":
        conf += f",keep_alive_interval=1,keep_alive_max_attempt={LEASE}"
    rdzv = ["--rdzv-backend", backend, "--rdzv-endpoint", endpoint, "--rdzv-id", run_id]
    restarts = "5" if scenario == "lemon" else "1"
    command = [args.ddprun, "--nnodes", "2:2", "--spares", "1", "--nproc-per-node", "1", *rdzv,
               "--rdzv-conf", conf, "--max-restarts", restarts, script]
    fail_now = os.path.join(work, "fail-now")  # b's worker fails once this exists
    beside = {"BESIDE_LEMON": "1"} if scenario == "lemon" else {}
    agents = [Agent("a", command, work, {"STAMPS": stamps, **beside})]
    if backend == "c10d":
        wait_for("agent a says it hosts the store",
                 lambda: "hosting the rendezvous store" in agents[0].stderr(), agents, work, STARTS)
    sick = {"race-348": {"SICK": "1", "FAIL_NOW": fail_now},
            "lemon": {"LEMON": "1", "FAIL_NOW": fail_now}}.get(scenario, {})
    agents.append(Agent("b", command, work, {"STAMPS": stamps, **sick}))
    started = lambda names: {s[0] for s in read_stamps(work) if s[1] == "start"} >= set(names)
    wait_for("a's and b's workers start", lambda: started("ab"), agents, work, STARTS)
    agents.append(Agent("c", command, work, {"STAMPS": stamps, **beside}))
    wait_for("c says it is a spare",
             lambda: "spare: waiting for a place (1 spare wanted, the job runs 2 nodes)"
             in agents[2].stderr(), agents, work, STARTS)

    if scenario == "lemon":
        open(fail_now, "w").close()
        fails = lambda: [s[4] for s in read_stamps(work) if s[0] == "b" and s[1] == "fail"]
        wait_for("b's workers fail three times", lambda: len(fails()) >= 3, agents, work,
                 3 * STARTS)
        wait_for("the spare's workers start", lambda: started("c"), agents, work, REPLACE_GUARD)
        took = min(s[4] for s in read_stamps(work) if s[0] == "c") - fails()[2]
        print(f"spare's workers running {took:.3f} s after b's third failure in a row "
              f"(last_call_timeout 30 s: not waited for)")
        if "it leaves the job, and a spare takes its place" not in agents[1].stderr():
            fail("b does not say it leaves for a spare", agents, work)
    elif scenario != "race-348":
        # The pool as `ddprun status` shows it.
        deadline = time.monotonic() + STATUS_WAIT
        while True:
            shown = subprocess.run([args.ddprun, "status", *rdzv], capture_output=True, text=True,
                                   timeout=20)
            if "spares: 1 waiting (" in shown.stdout and ", 1 wanted" in shown.stdout:
                print(f"status:\n{shown.stdout}")
                break
            if time.monotonic() > deadline:
                fail("ddprun status does not show the spare", agents, work,
                     f"--- last status (exit {shown.returncode}) ---\n{shown.stdout}"
                     f"{shown.stderr}")
            time.sleep(0.2)
        if any(s[0] == "c" for s in read_stamps(work)):
            fail("the spare started workers while it waited", agents, work)
        killed_at = time.time()
        agents[1].process.send_signal(signal.SIGKILL)
        wait_for("the spare's workers start", lambda: started("c"), agents, work,
                 REPLACE_GUARD + (LEASE if backend == "etcd" else 0))
        took = min(s[4] for s in read_stamps(work) if s[0] == "c") - killed_at
        goal = LEASE + 1.0 if backend == "etcd" else 1.0
        print(f"spare's workers running {took:.3f} s after b's agent was SIGKILLed "
              f"(goal: < {goal:.1f} s{', the lease timeout + 1 s' if backend == 'etcd' else ''})")
    else:
        # The moment b's worker fails, the restart round forms: b's agent dies then.
        open(fail_now, "w").close()
        wait_for("b's worker fails", lambda: any(s[0] == "b" and s[1] == "fail"
                                                 for s in read_stamps(work)),
                 agents, work, STARTS)
        agents[1].process.send_signal(signal.SIGKILL)

    deadline = time.monotonic() + JOB_TIMEOUT
    while agents[0].process.poll() is None or agents[2].process.poll() is None:
        if time.monotonic() > deadline:
            fail(f"the job still runs after {JOB_TIMEOUT} s", agents, work)
        time.sleep(0.1)
    agents[1].process.wait()
    codes = {agent.name: agent.process.returncode for agent in agents}
    print(f"exit codes: {codes}")
    if codes["a"] != 0 or codes["c"] != 0:
        fail("expected a and the spare c to exit 0", agents, work)
    if scenario == "lemon" and codes["b"] != 1:
        fail("expected b, left out, to exit with its workers' 1", agents, work)
    done = [s for s in read_stamps(work) if s[1] == "done"]
    if sorted(s[0] for s in done) != ["a", "c"] or any(s[3] != 2 for s in done):
        fail(f"expected a's and c's workers done in a world of 2, saw {done}", agents, work)
    print("PASS")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--scenario", choices=["c10d", "etcd", "race-348", "lemon"], required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddprun-spares-") as work:
        if args.scenario != "etcd":
            run_job(args, work, "c10d", f"127.0.0.1:{free_port()}", args.scenario)
            return
        if not os.path.exists("/usr/bin/etcd"):
            print("SKIP: no /usr/bin/etcd (apt-get install etcd-server)")
            sys.exit(SKIP)
        client, peer = free_port(), free_port()
        server = subprocess.Popen(
            ["/usr/bin/etcd", "--name", "s", "--data-dir", os.path.join(work, "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"s=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", client), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        print(f"FAIL: etcd did not start within 30 s (exit {server.poll()})")
                        sys.exit(1)
                    time.sleep(0.2)
            run_job(args, work, "etcd", f"127.0.0.1:{client}", "etcd")
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
