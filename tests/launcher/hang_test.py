#!/usr/bin/env python3
"""Hangs and unexplained deaths under the real ddprun, with real Python workers
(workers/hang_worker.py): what a user sees when a rank is stuck or killed.

  hang_test.py --ddprun BIN --python PY --scenario file-timer|heartbeat|at-exit|busy-at-exit|oom|
                                                  native-budget

PY is /usr/bin/python3 (torch 1.13) or scripts/torch2-python (torch 2.6; exit 77 = skipped when
it is missing). Exit 77 also when the scenario needs what is not here (oom: root and a memory
cgroup).

The exit timeout's two sides (issue #19, point 1): at-exit is the deadlock it exists for (a rank
blocked for ever after its peers exited 0, using no CPU: killed with its stacks, 137, no restart);
busy-at-exit is a rank 0 that works on past it (its own CPU, then a child's), which ddprun must
leave to finish (exit 0), as torchrun 1.13 does (run side by side with the same worker).

native-budget is the heartbeat hang with a native unwinder that never answers
(DDPRUN_HANG_DEBUGGER, a script that sleeps 60 s) and --hang-native-stack-budget 0.3: the
evidence says the native stack was not collected within 0.3 s (and the option to wait longer),
keeps the Python stack, and the kill is not held up by the unwinder (a generous bound).
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "hang_worker.py")
TORCH113_PYTHON = "/usr/bin/python3"
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from jobs import SKIP, Deadline, Job, torch_version, wait_all  # noqa: E402
from side_by_side import TORCHRUN, torchrun_command  # noqa: E402



def check(condition, why, job):
    if not condition:
        print(job.describe(), file=sys.stderr)
        sys.exit(f"FAILED: {why}")


def memory_cgroup(limit_bytes):
    """A memory-limited cgroup for the OOM worker to join: cgroup v1's memory hierarchy, or a
    cgroup v2 with the memory controller. Nothing when neither can be made here."""
    if os.geteuid() != 0:
        return None
    own = {}
    with open("/proc/self/cgroup") as lines:
        for line in lines:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            own[controllers] = path
    candidates = []
    if "memory" in own:  # v1
        candidates.append((f"/sys/fs/cgroup/memory{own['memory']}", "memory.limit_in_bytes"))
    if "" in own and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):  # v2 mounted alone
        with open("/sys/fs/cgroup/cgroup.controllers") as text:
            if "memory" in text.read().split():
                candidates.append((f"/sys/fs/cgroup{own['']}", "memory.max"))
    for parent, limit_file in candidates:
        path = tempfile.mkdtemp(prefix="ddprun-oom-", dir=parent) if os.path.isdir(parent) else None
        if path is None:
            continue
        try:
            with open(os.path.join(path, limit_file), "w") as limit:
                limit.write(str(limit_bytes))
            swap = os.path.join(path, "memory.memsw.limit_in_bytes" if limit_file.startswith("memory.limit")
                                else "memory.swap.max")
            if os.path.exists(swap):
                with open(swap, "w") as limit:
                    limit.write(str(limit_bytes) if "memsw" in swap else "0")
            return path
        except OSError:
            os.rmdir(path)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--scenario", required=True,
                        choices=["file-timer", "heartbeat", "at-exit", "busy-at-exit", "oom",
                                 "native-budget"])
    parser.add_argument("--timeout", type=float, default=100)
    args = parser.parse_args()
    deadline = Deadline(args.timeout)

    version = torch_version(args.python, deadline.cap(60))
    if version is None:
        return SKIP

    env = dict(os.environ, PYTHON_EXEC=args.python)
    options = ["--standalone", "--nproc-per-node", "2"]
    cgroup = None
    if args.scenario == "file-timer":
        env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1"
        options += ["--max-restarts", "1", "--event-log-handler", "console"]
    elif args.scenario == "heartbeat":
        options += ["--max-restarts", "1", "--hang-timeout", "2"]
    elif args.scenario == "native-budget":
        scratch = tempfile.mkdtemp(prefix="ddprun-native-budget-")
        unwinder = os.path.join(scratch, "slow-unwinder")
        with open(unwinder, "w") as script:
            script.write("#!/bin/sh\nexec sleep 60\n")
        os.chmod(unwinder, 0o755)
        env["DDPRUN_HANG_DEBUGGER"] = unwinder
        options += ["--max-restarts", "1", "--hang-timeout", "2", "--hang-native-stack-budget", "0.3",
                    "--log-dir", os.path.join(scratch, "logs")]
    elif args.scenario == "at-exit":
        options += ["--max-restarts", "2", "--exit-timeout", "2"]
    elif args.scenario == "busy-at-exit":
        # Rank 0 works for three exit timeouts after rank 1 exited 0: three looks, each sees work
        # (its own CPU, then its child's). LOGLEVEL=INFO shows the agent's account of each look.
        env["BUSY_SECONDS"] = "3"
        env["LOGLEVEL"] = "INFO"
        options += ["--max-restarts", "2", "--exit-timeout", "2"]
    elif args.scenario == "oom":
        cgroup = memory_cgroup(256 << 20)
        if cgroup is None:
            print("skipped: no memory cgroup can be made here (needs root and cgroup v1 memory or "
                  "cgroup v2 with the memory controller)")
            return SKIP
        env["OOM_CGROUP"] = cgroup
        # Rank 1's stderr is hidden from the console: the summary quotes it all the same.
        options += ["--local-ranks-filter", "0"]

    started = time.monotonic()
    worker_scenario = "heartbeat" if args.scenario == "native-budget" else args.scenario
    job = Job([args.ddprun, *options, WORKER, worker_scenario], name="ddprun", env=env)
    # torchrun 1.13 side by side where ddprun must behave as it does (it has no exit timeout).
    anchor = None
    if (args.scenario == "busy-at-exit" and os.path.realpath(args.python) == os.path.realpath(TORCH113_PYTHON)
            and os.path.exists(TORCHRUN)):
        anchor = Job(torchrun_command(TORCH113_PYTHON, "--nproc_per_node", "2", WORKER,
                                      args.scenario), name="torchrun 1.13", env=env)
    try:
        wait_all([job] + ([anchor] if anchor else []), deadline, f"torch {version}, {args.scenario}")
    finally:
        if cgroup:
            try:
                os.rmdir(cgroup)
            except OSError:
                pass
    took = time.monotonic() - started
    err = job.errors

    if args.scenario == "file-timer":
        check(job.returncode == 0, "the job restarted after the FileTimer kill and finished", job)
        check('its FileTimer "' in err, "the agent says the FileTimer expired", job)
        check("stuck_under_file_timer" in err, "the Python stack names where rank 0 was stuck", job)
        events = re.findall(r'^\{"name":\s*"(torchelastic\.worker\.status\.\w+|ddprun\.[\w.]+)"', err, re.M)
        check("torchelastic.worker.status.UNHEALTHY" in events and "ddprun.worker_group.restart" in events,
              f"console events for the hang and the restart (saw {events})", job)
    elif args.scenario == "heartbeat":
        check(job.returncode == 0, "the job restarted after the hang and finished", job)
        check("is hung: no progress reported for" in err, "the agent says rank 1 is hung", job)
        check("stop_reporting_and_wait" in err, "the Python stack names where rank 1 stopped", job)
    elif args.scenario == "native-budget":
        check(job.returncode == 0, "the job restarted after the hang and finished", job)
        check("stop_reporting_and_wait" in err, "the Python stack names where rank 1 stopped", job)
        saved = re.search(r"its threads' stacks are in (\S+)", err)
        check(saved, "the agent says where the evidence is", job)
        with open(saved.group(1)) as evidence:
            text = evidence.read()
        check("native stack: not collected within 0.3 s" in text and "--hang-native-stack-budget" in text,
              f"the evidence says the native stack was cut short, and how to wait longer:\n{text}", job)
        check("stop_reporting_and_wait" in text and "as the kernel sees them" in text,
              f"the evidence keeps the Python stack and the kernel's view:\n{text}", job)
        # From "is hung" to the kill: the budget (0.3 s), not the unwinder's 60 s. 15 s is a
        # generous bound for a loaded machine.
        stamp = r"^\[(\d+-\d+-\d+ \d+:\d+:[\d.]+)\] \[ddprun\] \[\w+\] "
        hung = re.search(stamp + r"worker 1 \(rank 1, pid \d+\) is hung", err, re.M)
        killed = re.search(stamp + r"worker 1 \(rank 1, pid \d+\) failed", err, re.M)
        check(hung and killed, "the agent logged the hang and the kill", job)
        at = [time.mktime(time.strptime(m.group(1).split(".")[0], "%Y-%m-%d %H:%M:%S"))
              + float("0." + m.group(1).split(".")[1]) for m in (hung, killed)]
        check(at[1] - at[0] < 15, f"the kill came {at[1] - at[0]:.2f} s after the hang was found", job)
        print(f"hang found -> rank 1 killed: {at[1] - at[0]:.2f} s (native stack budget 0.3 s)")
        shutil.rmtree(os.path.dirname(options[options.index("--log-dir") + 1]), ignore_errors=True)
    elif args.scenario == "at-exit":
        check(job.returncode == 137, f"a straggler ends the job with 137, no restart (got {job.returncode})", job)
        check("hung      : still running" in err and "--exit-timeout 2" in err,
              "the summary says the rank hung at exit", job)
        check(re.search(r"exited 0 and idle [^:]*: 0\.0\d s of CPU time, \d+ bytes of I/O, no progress "
                        r"report \(--exit-timeout 2\)", err),
              "the summary says what was seen: no CPU time, no I/O, no report", job)
        check("linger_after_peers" in err, "the summary's stack names where rank 1 lingered", job)
        check("restarting the job" not in err, "no restart after a straggler", job)
    elif args.scenario == "busy-at-exit":
        check(job.returncode == 0, f"a rank 0 that works past --exit-timeout finishes: exit 0 (got "
              f"{job.returncode})", job)
        check("rank 0: evaluated for" in job.output, "rank 0 said it finished its evaluation", job)
        check("is hung" not in err and "hung      :" not in err, "nothing was found hung", job)
        looks = re.findall(r"worker 0 \(pid \d+\) still runs [\d.]+ s after a worker of this node "
                           r"exited 0, and works", err)
        check(len(looks) >= 2, f"the agent looked at least twice and saw work each time (saw {len(looks)})", job)
        if anchor is not None:
            check(anchor.returncode == 0, f"torchrun 1.13 runs the same job to exit 0 (got {anchor.returncode})",
                  anchor)
            check("rank 0: evaluated for" in anchor.output, "under torchrun 1.13 too, rank 0 finished", anchor)
            print(f"side by side: ddprun exit {job.returncode}, torchrun 1.13 exit {anchor.returncode}")
        else:
            print(f"torchrun 1.13 side by side skipped: {TORCHRUN} missing or not torch 1.13's python")
    elif args.scenario == "oom":
        check(job.returncode == 137, f"the OOM kill ends the job with 137 (got {job.returncode})", job)
        check("oom       : " in err and "OOM killer" in err, "the summary names the OOM kill", job)
        check("rank 1: holding" in err, "the summary quotes rank 1's stderr, hidden from the console", job)
        check("rank 1: holding" not in job.output, "rank 1's output stayed off the console", job)
    print(f"torch {version}, {args.scenario}: as expected in {took:.1f} s")
    print(err[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
