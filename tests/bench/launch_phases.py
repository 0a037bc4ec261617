#!/usr/bin/python3
"""Where a launch's wall time goes: runs `ddprun --standalone --nproc-per-node 8 --no-python true`
with LOGLEVEL=debug and prints each log line's time against the process's start and exit (ms).
With --restart, where a restart's goes instead: 8 tests/bench/restart_probe.sh workers, the last
of which SIGKILLs itself; each log line from the worker's death on, against that death (ms), and
the last new worker's start. A profiling aid for docs/benchmarks.md ("Launch at the floor"), not
a benchmark of record.

  launch_phases.py <ddprun> [runs] [--restart]
"""
import datetime
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

LINE = re.compile(r"\[(\d+-\d+-\d+ [\d:.]+)\] \[ddprun\] \[\w+\] (.*)")


PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restart_probe.sh")


def marks_of(stderr):
    for line in stderr.splitlines():
        match = LINE.match(line)
        if match and "connection from" not in match.group(2):
            yield datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp(), \
                match.group(2)[:50]


def restart_phases(ddprun, runs):
    for _ in range(runs):
        work = tempfile.mkdtemp(prefix="ddprun-restart-phases-")
        run = subprocess.run([ddprun, "--standalone", "--nproc-per-node", "8", "--max-restarts", "1",
                              "--no-python", PROBE, work],
                             env=dict(os.environ, LOGLEVEL="debug"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, timeout=60)
        death = float(open(os.path.join(work, "death")).read())
        starts = [float(open(f).read()) for f in glob.glob(os.path.join(work, "start.1.*"))]
        shutil.rmtree(work)
        marks = [(at, text) for at, text in marks_of(run.stderr) if at >= death - 0.002]
        print(" | ".join([f"total {1000 * (max(starts) - death):.1f} (exit {run.returncode})"] +
                         [f"{1000 * (at - death):.0f}:{text}" for at, text in marks
                          if at <= max(starts) + 0.002] +
                         [f"{1000 * (max(starts) - death):.0f}:last new worker started"]))


def main():
    ddprun = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 5
    if "--restart" in sys.argv[2:]:
        restart_phases(ddprun, runs)
        return
    for _ in range(runs):
        start = time.time()
        run = subprocess.run([ddprun, "--standalone", "--nproc-per-node", "8", "--no-python", "true"],
                             env=dict(os.environ, LOGLEVEL="debug"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, timeout=60)
        end = time.time()
        marks = []
        for line in run.stderr.splitlines():
            match = LINE.match(line)
            if not match:
                continue
            at = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            text = match.group(2)[:50]
            if not text.strip():
                if not marks:
                    marks.append((at, "first log line"))
                continue
            if "connection from" not in text:
                marks.append((at, text))
        print(" | ".join([f"total {1000 * (end - start):.1f}"] +
                         [f"{1000 * (at - start):.0f}:{text}" for at, text in marks] +
                         [f"{1000 * (end - start):.0f}:exit"]))


if __name__ == "__main__":
    main()
