#!/usr/bin/python3
"""What the restart policy costs and saves, side by side in one run (docs/benchmarks.md,
"Failures told apart"):

  user-bug   2 workers whose script imports torch and raises the same ValueError at start, every
             attempt; --max-restarts 3. ddprun stops once the same failure came again with no
             progress between (after 1 restart, the user-error class); torchrun 1.13 and 2.6 spend
             the whole budget. Figures: restarts spent and wall time to the launcher's exit.
  progress   2 workers that report progress (DDPRUN_HEARTBEAT_FILE) and then crash, twice, and
             succeed in the third attempt; --max-restarts 3. ddprun without back-off, ddprun with
             --restart-backoff 1 (1 s, doubling only over failures without progress, so 1 s before
             each restart here), torchrun 1.13 and 2.6. Figures: restarts and wall time: what the
             back-off costs when the job does make progress.

Runs alternate between launchers (--runs each); each figure is min / median / max over the runs.

    bench_restart_policy.py --ddprun build/launcher/ddprun [--runs 10] [--json FILE]
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import bench_json

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TORCH2 = os.path.join(REPO, "scripts", "torch2-python")
SHARED = os.environ.get("DDPRUN_SHARED", os.path.abspath(os.path.join(REPO, "..", "shared")))
TORCHRUN113 = ["/usr/bin/python3", os.path.join(SHARED, "tools", "torchrun-py311.py")]

# Each attempt appends a line to ATTEMPTS (rank 0, at its start); the progress worker touches its heartbeat
# file, works a moment, and crashes while fewer than 3 attempts were made.
WORKER = r'''
import os, sys, time
attempts = sys.argv[1]
if os.environ["RANK"] == "0":  # before torch's import: a peer's failure may stop it during that
    with open(attempts, "a") as f:
        f.write(f"{time.time()}\n")
import torch
if sys.argv[2] == "user-bug":
    raise ValueError("learning rate must be positive, got -0.1")
beat = os.environ.get("DDPRUN_HEARTBEAT_FILE")
for step in range(5):
    time.sleep(0.1)
    if beat:
        os.utime(beat)
if os.environ["RANK"] == "1" and len(open(attempts).read().splitlines()) < 3:
    sys.exit(1)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launchers(ddprun):
    """name -> (argv head, torchrun's option spelling, PYTHON_EXEC or None)."""
    table = {
        "ddprun": ([ddprun], False, "/usr/bin/python3"),
        "ddprun --restart-backoff 1": ([ddprun, "--restart-backoff", "1"], False, "/usr/bin/python3"),
        "torchrun 1.13": (TORCHRUN113, True, None),
    }
    if os.path.exists(TORCH2) and subprocess.run([TORCH2, "-c", "import torch"], capture_output=True,
                                                 timeout=120).returncode == 0:
        table["torchrun 2.6"] = ([TORCH2, "-m", "torch.distributed.run"], True, None)
    return table


def one_run(head, torchrun, python, scenario, script, timeout=300):
    with tempfile.TemporaryDirectory(prefix="ddprun-bench-restart-") as tmp:
        attempts = os.path.join(tmp, "attempts")
        env = dict(os.environ)
        env.pop("PYTHON_EXEC", None)
        if python:
            env["PYTHON_EXEC"] = python
        spell = (lambda o: "--" + o[2:].replace("-", "_")) if torchrun else (lambda o: o)
        argv = list(head) + [spell("--nnodes"), "1", spell("--nproc-per-node"), "2",
                             spell("--max-restarts"), "3", spell("--rdzv-backend"), "c10d",
                             spell("--rdzv-endpoint"), f"127.0.0.1:{free_port()}",
                             script, attempts, scenario]
        start = time.monotonic()
        done = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True,
                              timeout=timeout)
        wall = time.monotonic() - start
        made = len(open(attempts).read().splitlines()) if os.path.exists(attempts) else 0
        return done, wall, made - 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--scenario", choices=["user-bug", "progress", "both"], default="both")
    bench_json.add_option(parser)
    args = parser.parse_args()
    bench_json.record(args, "restart_policy")
    ddprun = os.path.abspath(args.ddprun)
    table = launchers(ddprun)
    scenarios = ["user-bug", "progress"] if args.scenario == "both" else [args.scenario]
    with tempfile.TemporaryDirectory(prefix="ddprun-bench-restart-worker-") as tmp:
        script = os.path.join(tmp, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        for scenario in scenarios:
            seen = {name: [] for name in table}
            for _ in range(args.runs):
                for name, (head, torchrun, python) in table.items():
                    done, wall, restarts = one_run(head, torchrun, python, scenario, script)
                    want_ok = scenario == "progress"
                    if (done.returncode == 0) != want_ok:
                        print(f"{name} {scenario}: exit {done.returncode}, unexpected\n"
                              f"{done.stderr[-3000:]}", file=sys.stderr)
                        return 1
                    seen[name].append((restarts, wall, done.returncode))
            rows = []
            for name, runs in seen.items():
                walls = [w for _, w, _ in runs]
                restarts = sorted({r for r, _, _ in runs})
                codes = sorted({c for _, _, c in runs})
                rows.append([name, "/".join(map(str, restarts)), "/".join(map(str, codes)),
                             f"{min(walls):.2f} / {statistics.median(walls):.2f} / {max(walls):.2f}"])
            print(f"\n{scenario}: {args.runs} runs each, --max-restarts 3, 2 workers\n")
            print("| launcher | restarts spent | exit code | wall s (min / median / max) |")
            print("|---|---|---|---|")
            for row in rows:
                print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
