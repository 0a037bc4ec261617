#!/usr/bin/python3
"""Where a launch's wall time goes: runs `ddprun --standalone --nproc-per-node 8 --no-python true`
with LOGLEVEL=debug and prints each log line's time against the process's start and exit (ms).
A profiling aid for docs/benchmarks.md ("Launch at the floor"), not a benchmark of record.

  launch_phases.py <ddprun> [runs]
"""
import datetime
import os
import re
import subprocess
import sys
import time

LINE = re.compile(r"\[(\d+-\d+-\d+ [\d:.]+)\] \[ddprun\] \[\w+\] (.*)")


def main():
    ddprun = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
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
